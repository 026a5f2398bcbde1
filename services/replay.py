"""``voice-llm replay``: recorded WAV turns through the real pipeline, as one conversation.

Each file is one user turn; its end is the turn's t = 0 (the user just stopped speaking).
By default the assistant's audio goes to a real-time null sink, so turn timing includes
how long the reply takes to play and a scripted barge-in lands mid-sentence.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.heard import INTERRUPTED_MARK, MIN_KEPT_WORDS
from services import turn_options
from services.errors import UserError
from services.supervisor import Supervisor

if TYPE_CHECKING:
    import numpy as np

    from pipeline.audio_out import AudioSink
    from pipeline.bargein import BargeIn
    from pipeline.turn import TurnResult, TurnRunner


def add_arguments(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("wavs", nargs="+", metavar="WAV",
                   help="user turns, in conversation order (any PCM WAV)")
    turn_options.add_mode_option(p)
    p.add_argument("--interrupt-at", type=float, metavar="SEC",
                   help="barge in SEC seconds after each turn's playback starts")
    p.add_argument("--interrupt-wav", type=Path, metavar="FILE",
                   help="with --interrupt-at: what the user says when interrupting; it "
                   "becomes the next turn")
    turn_options.add_events_option(p)
    p.add_argument("--out-wav", type=Path, metavar="FILE",
                   help="also write the assistant's audio (what was played) to FILE")
    p.add_argument("--json", type=Path, metavar="FILE",
                   help="write per-turn metrics, transcripts and the history as JSON")
    p.add_argument("--play", action="store_true",
                   help="play through the sound card instead of the real-time null sink")
    p.add_argument("--live", action="store_true",
                   help="speak the files into a recorded microphone in real time and take "
                   "the turns like talk does (VAD, speculation, endpoint; docs/live.md) "
                   "instead of handing each file over whole")
    turn_options.add_live_options(p)
    turn_options.add_turn_options(p)


def run(args: argparse.Namespace) -> int:
    for wav in args.wavs:
        if not Path(wav).exists():
            raise UserError(f"{wav}: no such file")
    if args.interrupt_at is not None and args.interrupt_at < 0:
        raise UserError("--interrupt-at must be >= 0 seconds")
    if args.interrupt_wav is not None and args.interrupt_at is None:
        raise UserError("--interrupt-wav needs --interrupt-at SEC (when to interrupt)")
    if args.live:
        from services.replay_live import replay_live

        if args.interrupt_at is not None:
            raise UserError("--live takes the turns as spoken: --interrupt-at is for the "
                            "whole-file replay")
        turn_options.check_live_options(args)
        return asyncio.run(replay_live(args))
    return asyncio.run(_replay(args))


def make_sink(play: bool, out_wav: Path | None) -> AudioSink:
    from pipeline.audio_out import RealtimeNullSink, WavFileSink
    from pipeline.speaker import SoundDeviceSink

    inner: AudioSink = SoundDeviceSink() if play else RealtimeNullSink()
    return WavFileSink(out_wav, inner=inner) if out_wav else inner


async def _replay(args: argparse.Namespace) -> int:
    from pipeline.bargein import BargeIn

    stopper = turn_options.Stopper().install()
    write_event = turn_options.EventWriter(args.events)
    turns: list[dict[str, Any]] = []
    failures = 0
    runner: TurnRunner | None = None
    supervisor = Supervisor(args.llm_url)
    try:
        assistant = await turn_options.assistant_for(args, args.mode)
        sink = make_sink(args.play, args.out_wav)
        try:
            await sink.open(assistant.tts.sample_rate)
            runner = stopper.runner = assistant.runner(sink, listeners=[write_event])
            bargein = BargeIn(runner)
            runner.listeners.append(bargein.on_event)
            interruption = await _load_interruption(args.interrupt_wav)
            for wav in args.wavs:
                if stopper.stopped:
                    break
                audio = await load_turn(wav)
                if audio is None:
                    failures += 1
                    continue
                result = await _turn(runner, bargein, audio, args.interrupt_at)
                failures += _report(result, str(wav), turns)
                await _supervise(result, supervisor)
                _save(args.json, turns, runner, supervisor)  # every turn: a kill keeps it
                if result.interrupted and interruption is not None and not stopper.stopped:
                    # The user's interrupting utterance is the next turn, as in a real talk.
                    result = await _turn(runner, bargein, interruption, None)
                    failures += _report(result, str(args.interrupt_wav), turns)
                    await _supervise(result, supervisor)
                    _save(args.json, turns, runner, supervisor)
        finally:
            await sink.close()
            await assistant.close()
    except asyncio.CancelledError:
        stopper.absorb()  # our signal: save what there is and exit 128 + signal
    finally:
        write_event.close()
        stopper.remove()
    if runner is not None:
        _save(args.json, turns, runner, supervisor)
    if stopper.signal is not None:
        print(turn_options.saved_line("replay", stopper.signal, len(turns),
                                      [("events to", args.events),
                                       ("results and history to",
                                        args.json if runner is not None else None)]),
              file=sys.stderr)
        return stopper.exit_code
    assert runner is not None
    if args.interrupt_at is not None:
        for message in runner.conversation.history:
            if message["role"] == "assistant" and message["content"].endswith(INTERRUPTED_MARK):
                print(f"history keeps what was heard: …{message['content'][-70:]!r}")
    return 1 if failures else 0


def _save(path: Path | None, turns: list[dict[str, Any]], runner: TurnRunner,
          supervisor: Supervisor) -> None:
    if path is not None:
        caps = runner.llm.caps
        turn_options.write_json_atomic(path, {"turns": turns,
                                              "history": runner.conversation.to_json(),
                                              "server_restarts": supervisor.restarts,
                                              "llm_capabilities": caps and caps.to_dict()})


async def _supervise(result: TurnResult, supervisor: Supervisor) -> None:
    """After a failed turn: if the managed server died, say how and restart it."""
    if result.error is not None:
        line = await supervisor.check_async()
        if line:
            print(f"voice-llm replay: {line}", file=sys.stderr)


async def load_turn(wav: str | Path) -> np.ndarray | None:
    """One user turn's audio; a bad file is one line on stderr and None (turn skipped)."""
    from pipeline.audio_in import AudioFileError, load_wav

    try:
        return await asyncio.to_thread(load_wav, wav)
    except AudioFileError as e:
        print(f"voice-llm replay: {e} (turn skipped)", file=sys.stderr)
        return None


async def _load_interruption(path: Path | None) -> np.ndarray | None:
    from pipeline.audio_in import AudioFileError, load_wav

    if path is None:
        return None
    try:
        return await asyncio.to_thread(load_wav, path)
    except AudioFileError as e:
        raise UserError(f"--interrupt-wav {e}") from e


async def _turn(runner: TurnRunner, bargein: BargeIn, audio: np.ndarray,
                interrupt_at: float | None) -> TurnResult:
    """One turn; with ``interrupt_at`` a scripted barge-in lands that long into playback."""
    watcher = (asyncio.create_task(bargein.scripted(interrupt_at))
               if interrupt_at is not None else None)
    try:
        return await runner.run(audio)
    finally:
        if watcher:
            watcher.cancel()


def _report(result: TurnResult, file: str, turns: list[dict[str, Any]]) -> int:
    """Print one turn (what was said, its timeline) and record it; 1 if it failed."""
    from pipeline.llm_caps import not_reported_line
    from services.timeline import assistant_said, rejoined_note, render

    print(f"\nturn {result.turn} · {file} · {result.mode}")
    print(f"  you:       {result.transcript}{rejoined_note(result.events)}")
    if result.error:
        print(f"  error:     {result.error}")
    else:
        print(f"  assistant: {assistant_said(result)}")
        if result.interrupted and not result.committed:
            print(f"  history:   this turn is not kept: fewer than {MIN_KEPT_WORDS} words of "
                  "the reply were heard")
    print("\n".join(render(result.events, result.metrics)))
    unknown = not_reported_line(result.metrics.not_reported, interrupted=result.interrupted)
    if unknown:  # figures this LLM server cannot give: said so, not shown as numbers
        print(f"  {unknown}")
    turns.append(result.record(file))
    return 1 if result.error else 0

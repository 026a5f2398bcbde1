"""``voice-llm replay``: recorded WAV turns through the real pipeline, as one conversation.

Each file is one user turn; its end is the turn's t = 0 (the user just stopped speaking).
By default the assistant's audio goes to a real-time null sink, so turn timing includes
how long the reply takes to play and a scripted barge-in lands mid-sentence.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pipeline.heard import INTERRUPTED_MARK
from pipeline.turn import TurnConfig
from services.errors import UserError

if TYPE_CHECKING:
    from pipeline.audio_out import AudioSink
    from services.assistant import Assistant


def add_arguments(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("wavs", nargs="+", metavar="WAV",
                   help="user turns, in conversation order (any PCM WAV)")
    p.add_argument("--mode", choices=("streamed", "serial"), default="streamed",
                   help="streamed: speak from the first sentence; serial: whole reply, "
                   "then all TTS, then play (default %(default)s)")
    p.add_argument("--interrupt-at", type=float, metavar="SEC",
                   help="barge in SEC seconds after each turn's playback starts")
    p.add_argument("--interrupt-wav", type=Path, metavar="FILE",
                   help="with --interrupt-at: what the user says when interrupting; it "
                   "becomes the next turn")
    p.add_argument("--events", type=Path, metavar="FILE", help="write every timing event "
                   "as JSON lines to FILE")
    p.add_argument("--out-wav", type=Path, metavar="FILE",
                   help="also write the assistant's audio (what was played) to FILE")
    p.add_argument("--json", type=Path, metavar="FILE",
                   help="write per-turn metrics, transcripts and the history as JSON")
    p.add_argument("--play", action="store_true",
                   help="play through the sound card instead of the real-time null sink")
    add_turn_options(p)


def add_turn_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--max-tokens", type=int, default=160, help="cap on generated tokens "
                   "(default %(default)s)")
    p.add_argument("--max-sentences", type=int, default=4, help="close the LLM stream after "
                   "N sentences; 0 = no cap (default %(default)s)")
    p.add_argument("--first-max-chars", type=int, default=TurnConfig.first_max_chars,
                   metavar="N", help="soft cut: a first sentence longer than N characters "
                   "is released at its latest clause mark (, ; : -) so speech starts sooner; "
                   "0 = never cut (default %(default)s)")
    p.add_argument("--language", default="en", help="ASR language (default %(default)s)")
    p.add_argument("--tts-threads", type=int, default=1, metavar="N",
                   help="onnxruntime threads for Piper. In streamed mode Piper shares the 2 "
                   "cores with llama-server still decoding; 1 thread measured fastest for "
                   "the first sentence (README) (default %(default)s)")
    p.add_argument("--asr-threads", type=int, default=2, metavar="N",
                   help="CTranslate2 threads for Whisper (default %(default)s)")


def turn_config(args: argparse.Namespace, mode: str) -> TurnConfig:
    return TurnConfig(mode=mode, max_tokens=args.max_tokens,
                      max_sentences=args.max_sentences or None,
                      first_max_chars=args.first_max_chars or None)


async def assistant_for(args: argparse.Namespace, mode: str = "streamed") -> Assistant:
    """The assistant the turn options above ask for (replay, compare and talk share them)."""
    from services.assistant import load_assistant

    return await load_assistant(args.llm_url, language=args.language,
                                asr_threads=args.asr_threads, tts_threads=args.tts_threads,
                                config=turn_config(args, mode))


def run(args: argparse.Namespace) -> int:
    for wav in args.wavs:
        if not Path(wav).exists():
            raise UserError(f"{wav}: no such file")
    if args.interrupt_at is not None and args.interrupt_at < 0:
        raise UserError("--interrupt-at must be >= 0 seconds")
    if args.interrupt_wav is not None and args.interrupt_at is None:
        raise UserError("--interrupt-wav needs --interrupt-at SEC (when to interrupt)")
    return asyncio.run(_replay(args))


def make_sink(play: bool, out_wav: Path | None) -> AudioSink:
    from pipeline.audio_out import RealtimeNullSink, WavFileSink
    from pipeline.speaker import SoundDeviceSink

    inner: AudioSink = SoundDeviceSink() if play else RealtimeNullSink()
    return WavFileSink(out_wav, inner=inner) if out_wav else inner


async def _replay(args: argparse.Namespace) -> int:
    from pipeline.audio_in import AudioFileError, load_wav
    from pipeline.bargein import BargeIn
    from pipeline.events import Event
    events_file: IO[str] | None = args.events.open("w") if args.events else None

    def write_event(ev: Event) -> None:
        if events_file:
            events_file.write(ev.to_json() + "\n")

    assistant = await assistant_for(args, args.mode)
    sink = make_sink(args.play, args.out_wav)
    await sink.open(assistant.tts.sample_rate)
    runner = assistant.runner(sink, listeners=[write_event])
    bargein = BargeIn(runner)
    runner.listeners.append(bargein.on_event)
    turns: list[dict[str, Any]] = []
    failures = 0
    interruption = await _load_interruption(args.interrupt_wav)
    try:
        for wav in args.wavs:
            try:
                audio = await asyncio.to_thread(load_wav, wav)
            except AudioFileError as e:
                print(f"voice-llm replay: {e} (turn skipped)", file=sys.stderr)
                failures += 1
                continue
            result = await _turn(runner, bargein, audio, args.interrupt_at)
            failures += _report(result, str(wav), turns)
            if result.interrupted and interruption is not None:
                # The user's interrupting utterance is the next turn, as in a real talk.
                result = await _turn(runner, bargein, interruption, None)
                failures += _report(result, str(args.interrupt_wav), turns)
    finally:
        await sink.close()
        await assistant.close()
        if events_file:
            events_file.close()
    if args.json:
        args.json.write_text(json.dumps(
            {"turns": turns, "history": runner.conversation.to_json()}, indent=2,
            ensure_ascii=False))
    if args.interrupt_at is not None:
        for message in runner.conversation.history:
            if message["role"] == "assistant" and message["content"].endswith(INTERRUPTED_MARK):
                print(f"history keeps what was heard: …{message['content'][-70:]!r}")
    return 1 if failures else 0


async def _load_interruption(path: Path | None) -> Any:
    from pipeline.audio_in import AudioFileError, load_wav

    if path is None:
        return None
    try:
        return await asyncio.to_thread(load_wav, path)
    except AudioFileError as e:
        raise UserError(f"--interrupt-wav {e}") from e


async def _turn(runner: Any, bargein: Any, audio: Any, interrupt_at: float | None) -> Any:
    """One turn; with ``interrupt_at`` a scripted barge-in lands that long into playback."""
    watcher = (asyncio.create_task(bargein.scripted(interrupt_at))
               if interrupt_at is not None else None)
    try:
        return await runner.run(audio)
    finally:
        if watcher:
            watcher.cancel()


def _report(result: Any, file: str, turns: list[dict[str, Any]]) -> int:
    """Print one turn (what was said, its timeline) and record it; 1 if it failed."""
    from services.timeline import render

    print(f"\nturn {result.turn} · {file} · {result.mode}")
    print(f"  you:       {result.transcript}")
    if result.error:
        print(f"  error:     {result.error}")
    else:
        said = result.heard if result.interrupted else result.reply
        print(f"  assistant: {said.strip()}" + ("  [interrupted]" if result.interrupted
                                                else ""))
    print("\n".join(render(result.events, result.metrics)))
    turns.append(result.record(file))
    return 1 if result.error else 0

"""``voice-llm talk``: a spoken conversation through the microphone and the speakers.

One task reads the microphone for the whole conversation (``BargeIn.watch``): it cuts
utterances with Silero VAD, queues them as turns, and is the only thing that decides a
barge-in when the user talks over the assistant. The main loop runs one turn per
utterance. Ctrl-C ends it cleanly: the turn is cancelled, the LLM stream closed, both
audio streams stopped and closed, and the history optionally saved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pipeline.events import EventName
from services import turn_options
from services.errors import UserError

if TYPE_CHECKING:
    from collections.abc import AsyncIterable, Callable

    from pipeline.bargein import EchoGuard
    from pipeline.events import Event
    from pipeline.live import LiveTurn
    from pipeline.mic import MicBlock, SegmentEvent, UtteranceEnd
    from pipeline.playback_tap import PlaybackTap
    from services.supervisor import Supervisor

log = logging.getLogger(__name__)


def add_arguments(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("--list-devices", action="store_true",
                   help="list the audio devices PortAudio sees and exit")
    p.add_argument("--input-device", metavar="X", help="microphone: index or part of the "
                   "name from --list-devices (default: the system default)")
    p.add_argument("--output-device", metavar="Y", help="speakers: index or part of the "
                   "name (default: the system default)")
    turn_options.add_mode_option(p)
    turn_options.add_events_option(p)
    p.add_argument("--headphones", action="store_true",
                   help="no echo canceller and no echo guard: the microphone cannot hear "
                   "the assistant, so any speech over it barges in (see docs/talk.md)")
    p.add_argument("--no-echo-cancel", dest="echo_cancel", action="store_false",
                   help="open speakers without the echo canceller: the echo guard alone "
                   "asks for Silero >= 0.8 and 200 ms more speech over the reply")
    turn_options.add_live_options(p)
    p.add_argument("--bargein-min-ms", type=int, default=300, metavar="MS",
                   help="speech over the assistant that interrupts it (default %(default)s; "
                   "the echo guard adds 200 ms with --no-echo-cancel)")
    p.add_argument("--save-history", type=Path, metavar="FILE",
                   help="write the conversation history as JSON when the talk ends")
    p.add_argument("--record", type=Path, metavar="DIR",
                   help="write every utterance you say to DIR as utterance-NNN.wav (16 kHz "
                   "mono), whatever became of it; replay --live DIR/*.wav says them again")
    turn_options.add_turn_options(p)


def device_arg(spec: str | None) -> str | int | None:
    """sounddevice takes an index or a substring of the name."""
    if spec is None or spec == "":
        return None
    return int(spec) if spec.isdigit() else spec


def run(args: argparse.Namespace) -> int:
    from pipeline.sound_device import (
        AudioDeviceError,
        check_input_device,
        check_output_device,
        list_devices,
    )

    try:
        if args.list_devices:
            print(list_devices())
            return 0
        turn_options.check_live_options(args)
        if args.bargein_min_ms < 0:
            raise UserError("--bargein-min-ms must be >= 0")
        mic_name = check_input_device(device_arg(args.input_device))
        speaker_name = check_output_device(device_arg(args.output_device))
    except AudioDeviceError as e:
        raise UserError(str(e)) from None
    stopped: list[signal.Signals] = []
    try:
        return asyncio.run(_talk(args, mic_name, speaker_name, stopped))
    except (KeyboardInterrupt, asyncio.CancelledError):  # cleaned up inside already
        sig = stopped[0] if stopped else signal.SIGINT
        saved = [f"events in {args.events}"] if args.events else []
        saved += [f"history in {args.save_history}"] if args.save_history else []
        print(f"\nvoice-llm talk: stopped by {sig.name}; the running turn was closed like a "
              f"barge-in{'; ' + ', '.join(saved) if saved else ''}", file=sys.stderr)
        return 128 + int(sig)
    except AudioDeviceError as e:
        raise UserError(str(e)) from None


# What the status line says once the turn reaches an event.
_STATUS_OF = {EventName.TURN_START: "thinking", EventName.PLAYBACK_START: "speaking",
              EventName.BARGEIN: "interrupted"}


class Status:
    """The live one-line status: rewritten in place on a terminal, one line per change
    otherwise (so a log or a test can follow it)."""

    def __init__(self, out: IO[str] = sys.stderr) -> None:
        self.out = out
        self.tty = out.isatty()
        self.state = ""

    def set(self, state: str, detail: str = "") -> None:
        if state == self.state and not detail:
            return
        self.state = state
        text = f"[{state}] {detail}".rstrip()
        if self.tty:
            self.out.write(f"\r\033[K{text}")
        else:
            self.out.write(text + "\n")
        self.out.flush()

    def line(self, text: str) -> None:
        """A permanent line (the turn's summary) under the status."""
        self.out.write(("\r\033[K" if self.tty else "") + text + "\n")
        self.out.flush()
        self.state = ""

    def on_event(self, ev: Event) -> None:
        state = _STATUS_OF.get(ev.name)
        if state is not None:
            self.set(state)

    def on_segment(self, ev: SegmentEvent, busy: bool) -> None:
        from pipeline.mic import SpeechStart, UtteranceEnd

        if isinstance(ev, SpeechStart) and not busy:
            self.set("hearing you")
        elif isinstance(ev, UtteranceEnd) and not busy:
            self.set("thinking")


def echo_mode(args: argparse.Namespace) -> str:
    if args.headphones:
        return "headphones"
    return "echo canceller" if args.echo_cancel else "echo guard only"


def echo_path(mic: AsyncIterable[MicBlock], tap: PlaybackTap, args: argparse.Namespace,
              user_speaking: Callable[[], bool] = lambda: False,
              ) -> tuple[AsyncIterable[MicBlock], EchoGuard]:
    """The microphone as the rest of talk hears it, and the echo guard that goes with it:
    the canceller first unless --headphones or --no-echo-cancel (docs/talk.md)."""
    from pipeline.bargein import EchoGuard

    if args.headphones:
        return mic, EchoGuard(enabled=False)
    if not args.echo_cancel:
        return mic, EchoGuard()
    try:
        from pipeline.echo_cancel import EchoCanceller

        canceller = EchoCanceller(tap, user_speaking=user_speaking)
    except ImportError as e:
        raise UserError(f"the echo canceller needs the livekit package ({e}): run "
                        "scripts/setup, or talk with --no-echo-cancel") from None
    return canceller.cancel(mic), EchoGuard.behind_canceller()


async def _talk(args: argparse.Namespace, mic_name: str, speaker_name: str,
                stopped: list[signal.Signals]) -> int:
    from pipeline.bargein import BargeIn, SustainedSpeech
    from pipeline.live import LiveTurnTaker
    from pipeline.mic import MicSource, SegmenterConfig, SileroStream, UtteranceSegmenter
    from pipeline.playback_tap import PlaybackTap
    from pipeline.sound_device import AudioDeviceError
    from pipeline.speaker import SoundDeviceSink
    from pipeline.tasks import TaskSet
    from pipeline.utterance_record import UtteranceRecorder
    from services.supervisor import Supervisor

    # Ctrl-C / SIGTERM / SIGHUP cancel this task, so every `finally` below runs: the turn's
    # LLM stream closes, both audio streams stop, the history is saved. Installed explicitly:
    # a process started in the background by a shell has SIGINT ignored otherwise.
    main = asyncio.current_task()
    loop = asyncio.get_running_loop()
    def on_signal(sig: signal.Signals) -> None:
        stopped.append(sig)
        if main is not None:
            main.cancel()

    for sig in turn_options.STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    status = Status()
    write_event = turn_options.EventWriter(args.events)
    assistant = await turn_options.assistant_for(args, args.mode)
    sink = PlaybackTap(SoundDeviceSink(device_arg(args.output_device)))
    runner = assistant.runner(sink, listeners=[write_event, status.on_event],
                              config=replace(assistant.config, prime_next=args.prime))
    bargein = BargeIn(runner, cut_prepared=args.cut_prepared)
    runner.listeners.append(bargein.on_event)
    segmenter = UtteranceSegmenter(SileroStream(), SegmenterConfig(
        end_silence_ms=args.end_silence_ms, bargein_min_ms=args.bargein_min_ms,
        pause_ms=args.pause_ms if args.speculate else None,
        gap_ms=turn_options.gap_ms(args)))
    supervisor = Supervisor(args.llm_url)
    tasks = TaskSet("talk")

    def on_turn(turn: LiveTurn) -> None:
        _report(turn, status)
        if turn.result.error is not None and "supervise" not in tasks:
            tasks.spawn("supervise", _supervise(supervisor, status))

    live = LiveTurnTaker(runner, segmenter, on_turn=on_turn, speculate=args.speculate,
                         policy=turn_options.endpoint_policy(args), keep_warm=args.keep_warm,
                         pauses=turn_options.pause_habit(args))

    recorder = None if args.record is None else UtteranceRecorder(args.record)
    if recorder is not None:  # every utterance, however its end was taken
        keep = recorder

        def record(ended: UtteranceEnd) -> None:
            keep.save(ended.audio)

        segmenter.on_end = record

    def on_utterance(u: UtteranceEnd, during_playback: bool) -> None:
        if during_playback:  # began over the assistant and did not barge in: not a turn
            log.info("ignored %.0f ms of speech over the reply", u.speech_ms)
        live.on_utterance(u, during_playback)

    def on_segment(ev: SegmentEvent) -> None:
        status.on_segment(ev, runner.busy)
        live.on_segment(ev)

    try:
        await runner.prime()  # the system prompt in the slot before the first question
        await sink.open(assistant.tts.sample_rate)
        async with MicSource(device_arg(args.input_device)) as mic:
            blocks, guard = echo_path(mic, sink, args, lambda: segmenter.in_speech)
            watcher = tasks.spawn("bargein", bargein.watch(
                blocks, segmenter, on_utterance, detector=SustainedSpeech(args.bargein_min_ms),
                tap=sink, guard=guard, on_segment=on_segment))
            print(f"ready: listening on {mic_name!r}, speaking on {speaker_name!r} "
                  f"({args.mode}, {echo_mode(args)}); Ctrl-C ends", flush=True)
            status.set("listening")
            try:
                await watcher  # until the device goes away (its error ends the talk) or Ctrl-C
            except AudioDeviceError:
                segmenter.flush()  # what was being said when it went reaches --record
                raise
    finally:
        await live.close()
        await tasks.cancel_all()
        await sink.close()
        await assistant.close()
        write_event.close()
        if recorder is not None:
            print(recorder.summary(), file=sys.stderr)
        if args.save_history:
            args.save_history.write_text(json.dumps(runner.conversation.to_json(), indent=2,
                                                    ensure_ascii=False))
            print(f"history saved to {args.save_history}", file=sys.stderr)
    return 0


async def _supervise(supervisor: Supervisor, status: Status) -> None:
    """After a failed turn: if the managed llama-server died, say how and restart it, so
    the next thing the user says is answered (the same rule as replay's)."""
    line = await supervisor.check_async()
    if line:
        status.line(f"voice-llm talk: {line}")
        status.set("listening")


def _report(turn: LiveTurn, status: Status) -> None:
    """The lines under the status after each turn: what was heard and said, the numbers."""
    from services.timeline import assistant_said, endpoint_note, rejoined_note, summary_lines

    result = turn.result
    status.line(f"you: {result.transcript}{rejoined_note(result.events)}")
    if result.error:
        status.line(f"  error: {result.error}")
    else:
        status.line(f"assistant: {assistant_said(result)}")
    live = (f"speculative, endpoint {turn.endpoint_ms:.0f} ms" if turn.speculative
            else f"end-of-speech wait {turn.endpoint_ms:.0f} ms")
    early = next((e.data["early_ms"] for e in result.events
                  if e.name == EventName.ASR_START and "early_ms" in e.data), None)
    if early is not None:  # Whisper started at a gap before the pause (early_asr.py)
        live += f", Whisper {early:.0f} ms early"
    for line in summary_lines(result.metrics, live, endpoint_note(result.events)):
        status.line(f"  {line}")
    status.set("listening")

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
from typing import IO, Any

from pipeline.turn import TurnConfig
from services.errors import UserError


def add_arguments(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("wavs", nargs="+", metavar="WAV",
                   help="user turns, in conversation order (any PCM WAV)")
    p.add_argument("--mode", choices=("streamed", "serial"), default="streamed",
                   help="streamed: speak from the first sentence; serial: whole reply, "
                   "then all TTS, then play (default %(default)s)")
    p.add_argument("--interrupt-at", type=float, metavar="SEC",
                   help="barge in SEC seconds after each turn's playback starts")
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


def run(args: argparse.Namespace) -> int:
    for wav in args.wavs:
        if not Path(wav).exists():
            raise UserError(f"{wav}: no such file")
    if args.interrupt_at is not None and args.interrupt_at < 0:
        raise UserError("--interrupt-at must be >= 0 seconds")
    return asyncio.run(_replay(args))


def make_sink(play: bool, out_wav: Path | None) -> Any:
    from pipeline.audio_out import RealtimeNullSink, SoundDeviceSink, WavFileSink

    inner: Any = SoundDeviceSink() if play else RealtimeNullSink()
    return WavFileSink(out_wav, inner=inner) if out_wav else inner


async def _replay(args: argparse.Namespace) -> int:
    from pipeline.audio_in import AudioFileError, load_wav
    from pipeline.bargein import BargeIn
    from pipeline.events import Event
    from services.assistant import load_assistant
    from services.timeline import render

    events_file: IO[str] | None = args.events.open("w") if args.events else None

    def write_event(ev: Event) -> None:
        if events_file:
            events_file.write(ev.to_json() + "\n")

    assistant = await load_assistant(args.llm_url, language=args.language,
                                     asr_threads=args.asr_threads,
                                     tts_threads=args.tts_threads,
                                     config=turn_config(args, args.mode))
    sink = make_sink(args.play, args.out_wav)
    await sink.open(assistant.tts.sample_rate)
    runner = assistant.runner(sink, listeners=[write_event])
    bargein = BargeIn(runner)
    runner.listeners.append(bargein.on_event)
    turns: list[dict[str, Any]] = []
    failures = 0
    try:
        for wav in args.wavs:
            try:
                audio = await asyncio.to_thread(load_wav, wav)
            except AudioFileError as e:
                print(f"voice-llm replay: {e} (turn skipped)", file=sys.stderr)
                failures += 1
                continue
            watcher = (asyncio.create_task(bargein.scripted(args.interrupt_at))
                       if args.interrupt_at is not None else None)
            try:
                result = await runner.run(audio)
            finally:
                if watcher:
                    watcher.cancel()
            print(f"\nturn {result.turn} · {wav} · {result.mode}")
            print(f"  you:       {result.transcript}")
            if result.error:
                failures += 1
                print(f"  error:     {result.error}")
            else:
                said = result.heard if result.interrupted else result.reply
                print(f"  assistant: {said.strip()}" + ("  [interrupted]"
                                                        if result.interrupted else ""))
            print("\n".join(render(result.events, result.metrics)))
            turns.append({**result.metrics, "file": str(wav), "run": 1,
                          "transcript": result.transcript, "reply": result.reply,
                          "heard": result.heard, "error": result.error})
    finally:
        await sink.close()
        await assistant.close()
        if events_file:
            events_file.close()
    if args.json:
        args.json.write_text(json.dumps(
            {"turns": turns, "history": runner.conversation.to_json()}, indent=2,
            ensure_ascii=False))
    if runner.conversation.history and args.interrupt_at is not None:
        print(f"\nhistory ends: …{runner.conversation.history[-1]['content'][-70:]!r}")
    return 1 if failures else 0

"""What the commands that run turns (replay, compare, talk) share: the turn options, the
assistant those options ask for, and the ``--events`` JSON-lines writer."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pipeline.turn import MODES, TurnConfig

if TYPE_CHECKING:
    from pipeline.events import Event
    from services.assistant import Assistant


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
    add_asr_window_option(p)


def add_asr_window_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--asr-window", choices=("fitted", "full"), default="fitted",
                   help="Whisper's encoder window: fitted to the utterance (+3 s of "
                   "silence, ~0.15x the time) or faster-whisper's 30 s window, kept for "
                   "comparison (default %(default)s)")


def add_mode_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--mode", choices=MODES, default="streamed",
                   help="streamed: speak from the first sentence; serial: whole reply, "
                   "then all TTS, then play (default %(default)s)")


def add_events_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--events", type=Path, metavar="FILE", help="write every timing event "
                   "as JSON lines to FILE")


def turn_config(args: argparse.Namespace, mode: str) -> TurnConfig:
    return TurnConfig(mode=mode, max_tokens=args.max_tokens,
                      max_sentences=args.max_sentences or None,
                      first_max_chars=args.first_max_chars or None)


async def assistant_for(args: argparse.Namespace, mode: str = "streamed") -> Assistant:
    """The assistant the turn options above ask for."""
    from services.assistant import load_assistant

    return await load_assistant(args.llm_url, language=args.language,
                                asr_threads=args.asr_threads, tts_threads=args.tts_threads,
                                asr_window=args.asr_window,
                                config=turn_config(args, mode))


class EventWriter:
    """``--events FILE``: an event listener writing JSON lines, flushed per event so the
    file can be followed live (``tail -f``, tests). Without a path it writes nothing."""

    def __init__(self, path: Path | None) -> None:
        self._file: IO[str] | None = path.open("w") if path is not None else None

    def __call__(self, ev: Event) -> None:
        if self._file is not None:
            self._file.write(ev.to_json() + "\n")
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()

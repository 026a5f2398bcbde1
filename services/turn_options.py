"""What the commands that run turns (replay, compare, talk) share: the turn options
(including the ASR/TTS engines, services/engines.py), the assistant those options ask for,
and the ``--events`` JSON-lines writer."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.endpoint import EndpointPolicy
from pipeline.pauses import PauseHabit
from pipeline.turn import MODES, TurnConfig
from services.assistant import DEFAULT_TTS_THREADS
from services.engines import add_engine_options
from services.errors import UserError

if TYPE_CHECKING:
    from pipeline.events import Event
    from pipeline.turn import TurnRunner
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
    p.add_argument("--first-phrase-chars", type=int, default=TurnConfig.first_phrase_chars,
                   metavar="N", help="word-boundary cut: a first sentence with no clause "
                   "mark is released before the first 'and/to/is/in/by...' at or past N "
                   "characters; 0 = off (default %(default)s; measured in docs/live.md)")
    p.add_argument("--first-word-chars", type=int, default=TurnConfig.first_word_chars,
                   metavar="N", help="a first sentence that reaches N characters with neither "
                   "a clause mark nor such a word is cut after its last word that can end a "
                   "phrase (not 'the/of/my...'); 0 = off (default %(default)s)")
    p.add_argument("--repeat-penalty", type=float, default=TurnConfig.repeat_penalty,
                   metavar="X", help="llama-server's repetition penalty over the last "
                   f"{TurnConfig.repeat_last_n} tokens; without it the small model falls "
                   "into one template for every answer within ~15 turns; 1 = off "
                   "(default %(default)s; measured in docs/results.md)")
    p.add_argument("--language", default="en", help="ASR language (default %(default)s)")
    p.add_argument("--tts-threads", type=int, default=DEFAULT_TTS_THREADS, metavar="N",
                   help="onnxruntime threads for Piper. Piper synthesizes while llama-server "
                   "decodes the rest of the reply; with the server at nice 19 (`up --nice`) "
                   "2 threads were fastest for the first sentence (docs/results.md) "
                   "(default %(default)s)")
    p.add_argument("--asr-threads", type=int, default=2, metavar="N",
                   help="CTranslate2 threads for Whisper (default %(default)s)")
    add_asr_window_option(p)
    add_engine_options(p)


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
                      first_max_chars=args.first_max_chars or None,
                      first_phrase_chars=args.first_phrase_chars or None,
                      first_word_chars=args.first_word_chars or None,
                      repeat_penalty=None if args.repeat_penalty == 1 else args.repeat_penalty)


async def assistant_for(args: argparse.Namespace, mode: str = "streamed") -> Assistant:
    """The assistant the turn options above ask for."""
    from services.assistant import load_assistant

    return await load_assistant(args.llm_url, language=args.language,
                                asr_threads=args.asr_threads, tts_threads=args.tts_threads,
                                asr_window=args.asr_window,
                                config=turn_config(args, mode), asr=args.asr, tts=args.tts)


class EventWriter:
    """``--events FILE``: an event listener writing JSON lines. Each line goes to the file
    in one unbuffered ``write`` on an O_APPEND descriptor, so the file can be followed live
    (``tail -f``, tests) and a ``kill -9`` loses at most the line being written. Without a
    path it writes nothing."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.lines = 0
        self._fd: int | None = (
            os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
            if path is not None else None)

    def __call__(self, ev: Event) -> None:
        if self._fd is not None:
            data = (ev.to_json() + "\n").encode()
            while data:  # a regular file takes it all at once; a pipe may not
                data = data[os.write(self._fd, data):]
            self.lines += 1

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` through a temp file and a rename, so a reader (or
    a process killed mid-write) only ever sees the previous or the new complete file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=2, ensure_ascii=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


# What ends a command cleanly: Ctrl-C, `kill`, and the terminal closing (SIGHUP, whose
# default would end the process without saving the history).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopper:
    """SIGINT / SIGTERM / SIGHUP for the commands that run turns (replay, compare, lab).

    The first signal closes the running turn the way barge-in does (``runner.interrupt``:
    silence, stream closed, slot confirmed idle), so the command can save everything and
    stop after it; with no turn running, or if the turn has not closed within ``grace``
    seconds, or on a second signal, the main task is cancelled and its ``finally`` blocks
    run. Installed explicitly: a process started in the background by a shell has SIGINT
    ignored otherwise. ``exit_code`` is 128 + the signal (130 / 143 / 129), as a shell reports."""

    def __init__(self, grace: float = 5.0) -> None:
        self.grace = grace
        self.signal: signal.Signals | None = None
        self.runner: TurnRunner | None = None  # the runner whose turn a signal closes
        self._main: asyncio.Task[Any] | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def install(self) -> Stopper:
        loop = asyncio.get_running_loop()
        self._main = asyncio.current_task()
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self._on_signal, sig)
        return self

    def remove(self) -> None:
        if self._deadline is not None:  # the turn closed in time: do not cancel the saving
            self._deadline.cancel()
        loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)

    @property
    def stopped(self) -> bool:
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signal) if self.signal is not None else 0

    def _on_signal(self, sig: signal.Signals) -> None:
        first = self.signal is None
        self.signal = self.signal or sig
        if first and self.runner is not None and self.runner.interrupt(f"signal:{sig.name}"):
            if self._main is not None:
                self._deadline = asyncio.get_running_loop().call_later(self.grace,
                                                                       self._cancel)
            return
        self._cancel()

    def _cancel(self) -> None:
        if self._main is not None and not self._main.done():
            self._main.cancel()

    def absorb(self) -> None:
        """Called in ``except CancelledError``: re-raise unless the cancel was ours."""
        if self.signal is None:
            raise asyncio.CancelledError
        task = asyncio.current_task()
        if task is not None:
            while task.cancelling():
                task.uncancel()


def saved_line(command: str, sig: signal.Signals, turns: int,
               saved: list[tuple[str, Path | None]]) -> str:
    """The one line a stopped command prints: what it finished and where it is."""
    where = [f"{what} {path}" for what, path in saved if path is not None]
    return (f"voice-llm {command}: stopped by {sig.name} after {turns} turn"
            f"{'' if turns == 1 else 's'}; saved " + (", ".join(where) or "nothing (no "
                                                       "--events/--json asked)"))


def add_live_options(p: argparse.ArgumentParser) -> None:
    """How live turns are taken (talk, replay --live; docs/live.md)."""
    p.add_argument("--end-silence-ms", type=int, default=600, metavar="MS",
                   help="silence that ends your utterance when nothing better is known "
                   "(default %(default)s; with speculation the endpoint policy decides "
                   "from what you said, see docs/live.md)")
    p.add_argument("--no-speculate", dest="speculate", action="store_false",
                   help="start the turn only at the end of your utterance (no speculative "
                   "start at the first pause, a fixed --end-silence-ms)")
    p.add_argument("--pause-ms", type=int, default=200, metavar="MS",
                   help="pause that starts a speculative turn (default %(default)s)")
    p.add_argument("--gap-ms", type=int, default=96, metavar="MS",
                   help="shorter silence at which Whisper starts on your words so far, so "
                   "the turn at the pause finds the transcript (nearly) done (default "
                   "%(default)s, 0 = off; docs/live.md)")
    p.add_argument("--complete-ms", type=int, default=EndpointPolicy.complete_ms, metavar="MS",
                   help="the endpoint's wait after words that make a finished question or "
                   "sentence (default %(default)s). Longer: fewer pauses taken for the end "
                   "(held-out mid-sentence pauses, fresh split, the reply ready 350 ms after "
                   "the pause: 14%% at 450, 3%% at 800, 0%% at 900), every finished "
                   "question answered later once the reply is ready sooner than the wait "
                   "(docs/live.md)")
    p.add_argument("--no-learn-pauses", dest="learn_pauses", action="store_false",
                   help="always wait --complete-ms after a finished question or sentence. "
                   "By default a user who went on after such a pause (or cut in on the "
                   "reply with the rest of the request) gets that pause plus 150 ms, up to "
                   "1000, for their next 8 utterances: held-out pauses taken for the end "
                   "5 -> 2 of 96 and 9 -> 3-4 of 64 (docs/live.md)")
    p.add_argument("--no-cut-prepared", dest="cut_prepared", action="store_false",
                   help="your voice cuts the reply only once it plays, not while it is "
                   "being prepared after the end was taken (by default going on after a "
                   "pause cuts it, and its words go with the rest; docs/talk.md)")
    p.add_argument("--no-keep-warm", dest="keep_warm", action="store_false",
                   help="do not run tiny Whisper and Piper passes while you speak (they keep "
                   "the engines warm for the turn at your pause: ~10%% of the CPU while you "
                   "speak; docs/live.md)")
    p.add_argument("--no-prime", dest="prime", action="store_false",
                   help="do not prefill the next prompt's start (the history with the reply "
                   "as kept, and your next message's header) on the LLM server after each "
                   "turn; by default it is done once the reply has played (or been cut), so the "
                   "next question pays only for its own words (docs/live.md)")


def check_live_options(args: argparse.Namespace) -> None:
    if args.end_silence_ms < 100 or args.pause_ms < 64:
        raise UserError("--end-silence-ms must be >= 100 and --pause-ms >= 64")
    if not 0 < args.complete_ms <= EndpointPolicy.default_ms:
        raise UserError(f"--complete-ms must be from 1 to {EndpointPolicy.default_ms} (the "
                        f"wait when nothing is known), not {args.complete_ms}")
    if args.gap_ms and not 32 <= args.gap_ms < args.pause_ms:
        raise UserError(f"--gap-ms must be 0 (off) or from 32 to under --pause-ms "
                        f"({args.pause_ms}), not {args.gap_ms}")


def endpoint_policy(args: argparse.Namespace) -> EndpointPolicy:
    """The endpoint policy for these options (``--complete-ms``)."""
    return EndpointPolicy(complete_ms=args.complete_ms)


def pause_habit(args: argparse.Namespace) -> PauseHabit | None:
    """This user's pauses, learned as they talk (``--no-learn-pauses``: None)."""
    return PauseHabit() if args.learn_pauses else None


def gap_ms(args: argparse.Namespace) -> int | None:
    """The segmenter's gap (early Whisper) for these options: None without speculation."""
    return (args.gap_ms or None) if args.speculate else None

"""Text to speech: Piper, one sentence at a time, plus markdown cleaning for speech.

``synthesize`` is blocking (the turn runner calls it through ``asyncio.to_thread``). The
history keeps the model's raw text token for token (prefix reuse in llama-server's KV
cache depends on it); only the copy sent to TTS goes through ``speakable``.
"""

from __future__ import annotations

import ctypes
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from piper import PiperVoice

log = logging.getLogger(__name__)

_WARMUP_TEXT = "Hello."
_WARM_TEXT = "Hm."

# --- markdown -> speech -----------------------------------------------------------------
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_FENCE = re.compile(r"^\s*(```|~~~).*$", re.MULTILINE)
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$", re.MULTILINE)  # ---, ***, ___
_HEADING = re.compile(r"^\s*#{1,6}\s+")
_QUOTE = re.compile(r"^\s*>+\s?")
# Also "1. - item", and a bare "2." left over when a sentence splitter cut after it.
_BULLET = re.compile(r"^\s*(?:(?:[-*+•‣◦]|\d{1,3}[.)])(?:\s+|$))+")
# Emphasis markers touching a word. A lone " * " is not markdown emphasis (it may be a
# multiplication), and unbalanced markers are normal: the splitter cuts bold spans.
_STARS = re.compile(r"\*+(?=\S)|(?<=\S)\*+")
_UNDERSCORES = re.compile(r"__+")
_SPACES = re.compile(r"[ \t]+")
_END_PUNCT = ".!?:;,"
_SPEAKABLE = re.compile(r"\w")


def speakable(text: str) -> str:
    """Markdown that small models produce, cleaned for a voice: emphasis and code marks,
    headings, list bullets and numbers, links (their text is kept). Idempotent."""
    text = _IMAGE.sub(r"\1", text)
    text = _LINK.sub(r"\1", text)
    text = _FENCE.sub("", text)
    text = _RULE.sub("", text)
    lines = [_clean_line(line) for line in text.splitlines()]
    lines = [line for line in lines if line]
    return " ".join(_pause_after(line, last=i == len(lines) - 1) for i, line in enumerate(lines))


def _clean_line(line: str) -> str:
    line = _HEADING.sub("", line)
    line = _QUOTE.sub("", line)
    line = _BULLET.sub("", line)
    line = _STARS.sub("", line)
    line = _UNDERSCORES.sub("", line)
    line = line.replace("`", "")
    return _SPACES.sub(" ", line).strip()


def _pause_after(line: str, *, last: bool) -> str:
    # A heading or list item runs straight into the next line once newlines are gone;
    # a period gives the voice the pause a reader sees.
    return line if last or line[-1] in _END_PUNCT else line + "."


# --- Piper ----------------------------------------------------------------------------
class PiperTts:
    """A Piper voice, loaded once; ``synthesize`` returns int16 mono at ``sample_rate``."""

    engine = "local"  # in this process (pipeline.wyoming_tts: on a Wyoming server)

    def __init__(self, model_path: Path, config_path: Path | None = None, *,
                 threads: int | None = None) -> None:
        self.model_path = Path(model_path)
        self.config_path = Path(config_path or f"{model_path}.json")
        self.threads = threads
        # Read now (cheap, no onnxruntime) so sinks can be opened before the model loads.
        self._config = json.loads(self.config_path.read_text(encoding="utf-8"))
        self.sample_rate: int = int(self._config["audio"]["sample_rate"])
        self._voice: PiperVoice | None = None
        self._session: _AbortableSession | None = None

    @property
    def loaded(self) -> bool:
        return self._voice is not None

    def load(self) -> None:
        """Load the ONNX model (once) and synthesize a warm-up sentence."""
        if self._voice is not None:
            return
        started = time.monotonic()
        self._voice = self._load_voice()
        loaded = time.monotonic()
        self.synthesize(_WARMUP_TEXT)  # first run allocates onnxruntime's buffers
        log.info("piper voice %s loaded in %.0f ms (+%.0f ms warm-up), threads=%s",
                 self.model_path.name, (loaded - started) * 1000,
                 (time.monotonic() - loaded) * 1000, self.threads or "onnxruntime default")

    def _load_voice(self) -> PiperVoice:
        # PiperVoice.load() has no thread option (only use_cuda), so build the voice the
        # same way it does, with our own SessionOptions: the split of the 2 cores between
        # llama-server, Whisper and Piper is a tuning knob for first-audio latency.
        import onnxruntime
        from piper import PiperVoice
        from piper.config import PiperConfig

        options = onnxruntime.SessionOptions()
        if self.threads is not None:
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(str(self.model_path), sess_options=options,
                                               providers=["CPUExecutionProvider"])
        self._session = _AbortableSession(session)
        return PiperVoice(session=self._session,
                          config=PiperConfig.from_dict(self._config))

    def abort(self, thread_id: int | None = None) -> None:
        """Stop the synthesis running in thread ``thread_id`` (all, when None) now, for
        barge-in: that ``synthesize`` raises ``SynthesisAborted`` instead of burning the CPU
        the next turn needs. Other threads' (other sessions') syntheses go on."""
        if self._session is not None:
            self._session.abort(thread_id)

    def keep_warm(self) -> None:
        """One short word through the voice (``pipeline.warm``: after a few seconds idle
        the next sentence here took up to 1.3x longer)."""
        if self._voice is not None:
            self.synthesize(_WARM_TEXT)

    def synthesize(self, text: str) -> np.ndarray:
        """int16 mono samples for ``text`` (cleaned with ``speakable`` first; calling it
        beforehand is harmless). Empty or unspeakable text gives an empty array."""
        spoken = speakable(text)
        if not _SPEAKABLE.search(spoken):
            return np.zeros(0, dtype=np.int16)
        if self._voice is None:
            self.load()
        assert self._voice is not None
        # Piper yields one AudioChunk per sentence it finds in the text.
        try:
            chunks = [chunk.audio_int16_array for chunk in self._voice.synthesize(spoken)]
        except Exception as e:
            if self._session is not None and self._session.was_aborted():
                raise SynthesisAborted(text) from e
            raise
        finally:
            _release_freed_memory()
        if not chunks:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(chunks).astype(np.int16, copy=False)


# Piper starts every sentence with 20-60 ms of digital silence (measured on the joe voice:
# "One effective way" 60 ms, "The history of bicycles" 30 ms). Before the first sentence of a
# reply that is only waiting; the margin keeps the softest onsets whole.
ONSET_FLOOR = 33  # int16, about -60 dBFS: far under any speech sound
ONSET_MARGIN_MS = 5.0


def trim_leading_silence(samples: np.ndarray, sample_rate: int,
                         margin_ms: float = ONSET_MARGIN_MS) -> np.ndarray:
    """``samples`` (int16) from ``margin_ms`` before the first one above ``ONSET_FLOOR``;
    unchanged when nothing is above it (silence is not this function's to judge)."""
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > ONSET_FLOOR)
    if loud.size == 0:
        return samples
    return samples[max(0, int(loud[0]) - int(margin_ms * sample_rate / 1000)):]


def _glibc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
        return trim
    except (OSError, AttributeError):  # not glibc: nothing to hand back this way
        return None


_MALLOC_TRIM = _glibc_trim()


def _release_freed_memory() -> None:
    """Hand the heap pages a synthesis freed back to the OS. Each sentence's tensors have
    their own sizes, and glibc kept the freed pages: Piper alone grew from 169 to 321 MB
    over 300 varied sentences, 149 to 155 MB with this after each, at ~0.6 ms a call
    against ~340 ms for the sentence (docs/results.md)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


class SynthesisAborted(Exception):
    """``PiperTts.abort()`` stopped this synthesis."""


class _AbortableSession:
    """An onnxruntime session whose running ``run`` calls can be stopped from another
    thread: each call gets its own ``RunOptions`` and ``abort()`` sets their terminate flag
    (onnxruntime checks it between operators). Everything else is forwarded."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._active: dict[int, Any] = {}  # thread id -> RunOptions of its running call
        self._aborted = threading.local()
        self._lock = threading.Lock()

    def run(self, output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        import onnxruntime

        options = onnxruntime.RunOptions()
        # Hand the arena back after every run: it grows to the longest sentence ever
        # synthesized and keeps it (RSS 777 MB after one 540-character sentence, 201 with
        # this; the soak's RSS stepped from 549 to 994 MB at one long reply). Cost: 3-5 %
        # of a short sentence's synthesis (95 -> 98 ms), measured alternating in one process.
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        self._aborted.flag = False
        me = threading.get_ident()
        with self._lock:
            self._active[me] = options
        try:
            return self._session.run(output_names, input_feed, options)
        finally:
            with self._lock:
                self._active.pop(me, None)
            self._aborted.flag = bool(options.terminate)

    def abort(self, thread_id: int | None = None) -> None:
        with self._lock:
            for tid, options in self._active.items():
                if thread_id is None or tid == thread_id:
                    options.terminate = True

    def was_aborted(self) -> bool:
        """Whether this thread's last run was stopped by ``abort()``."""
        return bool(getattr(self._aborted, "flag", False))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

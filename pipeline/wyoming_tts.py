"""Speech synthesis on a Wyoming server (``wyoming-piper`` or any other).

The same blocking interface as ``pipeline.tts.PiperTts``: ``synthesize(text)`` returns
int16 mono samples, ``abort(thread_id)`` stops one running call (barge-in). One sentence is
one request on its own connection: ``synthesize`` -> ``audio-start``, ``audio-chunk``...,
``audio-stop``.

**Why one ``synthesize`` per sentence and not the protocol's text streaming.** The turn
runner already streams: each sentence goes to TTS the moment the splitter releases it, so
the first sentence's audio starts while the LLM still writes the second. Wyoming's
streaming mode (``synthesize-start`` / ``-chunk`` / ``-stop``) is for clients that do not
split: the server runs its own sentence detector on the text, and that detector
(wyoming-piper's ``sentence_stream``) holds every sentence until the *next* text arrives
("Hello there. " comes out only when "How" follows), and glues the splitter's soft-cut first
clause ("To make a good cup of tea,") back onto the rest of its sentence. Streamed text
would therefore start speaking one sentence later. A whole sentence per request is spoken as
soon as it is synthesized, and the audio maps one-to-one onto the splitter's sentences, which
the barge-in bookkeeping (what was heard, to the sample) needs.

**Barge-in.** ``abort`` shuts the calling thread's socket down: the blocked read returns at
once and ``synthesize`` raises ``SynthesisAborted``, so playback and the next turn never wait
for the server. The protocol has no cancel: the server finishes the one sentence it is on
(it cannot send it anywhere) and nothing after it was ever sent.
"""

from __future__ import annotations

import logging
import threading

import numpy as np

from pipeline.tts import SynthesisAborted, speakable
from pipeline.wyoming_wire import Connection, WyomingError, describe

log = logging.getLogger(__name__)

_WARMUP_TEXT = "Hello."
_SPEAKABLE_CHAR = str.isalnum


class WyomingTts:
    """A Wyoming TTS server at ``host:port``; ``synthesize`` is blocking."""

    def __init__(self, host: str, port: int, *, voice: str | None = None,
                 timeout: float = 30.0) -> None:
        self.host, self.port = host, port
        self.engine = f"wyoming://{host}:{port}"
        self.voice = voice  # None: the server's default voice
        self.timeout = timeout
        # Known after load(): Wyoming's info does not say a voice's rate, its audio does.
        self.sample_rate: int = 0
        self.server = ""
        self._active: dict[int, Connection] = {}  # thread id -> its running request
        self._aborted: set[int] = set()
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self.sample_rate > 0

    def load(self) -> None:
        """Ask the server what it is (it must offer TTS), then synthesize a warm-up
        sentence, which also tells the sample rate that sinks are opened with."""
        if self.loaded:
            return
        from wyoming.info import Info

        info = Info.from_event(describe(self.host, self.port, self.timeout, self.engine))
        if not info.tts:
            raise WyomingError(f"{self.engine}: this Wyoming server offers no speech "
                               "synthesis (is it an ASR server?)")
        program = info.tts[0]
        self.server = f"{program.name} {program.version or ''}".strip()
        samples, rate = self._request(_WARMUP_TEXT)
        if not rate or not samples.size:
            raise WyomingError(f"{self.engine}: the warm-up sentence came back without audio")
        self.sample_rate = rate
        log.info("wyoming TTS %s: %s, %d Hz", self.engine, self.server, rate)

    def synthesize(self, text: str) -> np.ndarray:
        """int16 mono samples for ``text`` (cleaned with ``speakable``); empty for
        unspeakable text; ``SynthesisAborted`` when ``abort`` stopped it."""
        spoken = speakable(text)
        if not any(map(_SPEAKABLE_CHAR, spoken)):
            return np.zeros(0, dtype=np.int16)
        if not self.loaded:
            self.load()
        samples, rate = self._request(spoken)
        if samples.size and rate != self.sample_rate:
            raise WyomingError(f"{self.engine}: audio came at {rate} Hz, not the "
                               f"{self.sample_rate} Hz the sink was opened with")
        return samples

    def abort(self, thread_id: int | None = None) -> None:
        """Stop the request running in thread ``thread_id`` (all, when None) now."""
        with self._lock:
            for tid, conn in self._active.items():
                if thread_id is None or tid == thread_id:
                    self._aborted.add(tid)
                    conn.shutdown()

    def _request(self, text: str) -> tuple[np.ndarray, int]:
        from wyoming.audio import AudioChunk, AudioStart, AudioStop
        from wyoming.error import Error
        from wyoming.tts import Synthesize, SynthesizeVoice

        me = threading.get_ident()
        voice = SynthesizeVoice(name=self.voice) if self.voice else None
        parts: list[np.ndarray] = []
        rate = width = channels = 0
        conn = Connection(self.host, self.port, self.timeout, self.engine)
        with self._lock:
            self._aborted.discard(me)
            self._active[me] = conn
        try:
            with conn:
                conn.write(Synthesize(text=text, voice=voice).event())
                while True:
                    event = conn.read()
                    if AudioStart.is_type(event.type):
                        start = AudioStart.from_event(event)
                        rate, width, channels = start.rate, start.width, start.channels
                    elif AudioChunk.is_type(event.type):
                        chunk = AudioChunk.from_event(event)
                        rate, width, channels = chunk.rate, chunk.width, chunk.channels
                        parts.append(_mono_int16(chunk.audio, width, channels, self.engine))
                    elif AudioStop.is_type(event.type):
                        break
                    elif Error.is_type(event.type):
                        raise WyomingError(f"{self.engine}: {Error.from_event(event).text}")
        except WyomingError as e:
            if me in self._aborted:
                raise SynthesisAborted(text) from e
            raise
        finally:
            with self._lock:
                self._active.pop(me, None)
                aborted = me in self._aborted
                self._aborted.discard(me)
        if aborted:  # stopped after the last chunk arrived: still not to be played
            raise SynthesisAborted(text)
        samples = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int16)
        return samples, rate


def _mono_int16(audio: bytes, width: int, channels: int, engine: str) -> np.ndarray:
    if width != 2:
        raise WyomingError(f"{engine}: audio of {width}-byte samples (only 16-bit is "
                           "supported)")
    samples = np.frombuffer(audio, dtype="<i2")
    if channels > 1:
        samples = samples[: len(samples) // channels * channels:channels]
    return samples.astype(np.int16, copy=True)

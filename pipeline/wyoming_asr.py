"""Speech recognition on a Wyoming server (``wyoming-faster-whisper`` or any other).

The same blocking interface as ``pipeline.asr.WhisperAsr`` (the turn runner calls it
through ``asyncio.to_thread``), so either engine plugs into the turn runner. One utterance
is one TCP connection, as the protocol has it (the server closes after the transcript):
``transcribe`` -> ``audio-start`` -> ``audio-chunk``... -> ``audio-stop``, then the
``transcript`` comes back.

The speech gate's first half (Silero VAD, local, cheap) still runs before anything is
sent, so silence and noise end the turn as "heard no speech" without a server call. Its
second half needs Whisper's no-speech probability and log-probability, which the
protocol does not carry: a Wyoming transcript has no confidence, and the live endpoint
policy then judges from the words alone (``avg_logprob`` absent in ``asr.end``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from pipeline.audio_in import SAMPLE_RATE
from pipeline.speech_gate import SpeechGate
from pipeline.wyoming_wire import Connection, WyomingError, describe

log = logging.getLogger(__name__)

CHUNK_SAMPLES = 1024  # per audio-chunk event (what Wyoming's own clients send)
_WARMUP_SECONDS = 1.0


@dataclass
class AsrCall:
    """What the last ``transcribe`` cost on the wire (for benches and logs)."""

    connect_ms: float = 0.0
    send_ms: float = 0.0  # transcribe .. audio-stop written
    reply_ms: float = 0.0  # audio-stop written -> transcript read: the server's work


class WyomingAsr:
    """A Wyoming ASR server at ``host:port``; ``transcribe`` is blocking."""

    def __init__(self, host: str, port: int, *, language: str | None = "en",
                 timeout: float = 30.0, gate: SpeechGate | None | bool = True) -> None:
        self.host, self.port = host, port
        self.engine = f"wyoming://{host}:{port}"
        self.language = language
        self.timeout = timeout
        self.gate: SpeechGate | None = (SpeechGate() if gate is True
                                        else None if gate is False else gate)
        self.server = ""  # the program and model the server describes itself with
        self.last_call = AsrCall()
        self._loaded = False

    @property
    def loaded(self) -> bool:
        return self._loaded

    def load(self) -> None:
        """Ask the server what it is (it must offer ASR), warm it up with 1 s of silence."""
        if self._loaded:
            return
        from wyoming.info import Info

        info = Info.from_event(describe(self.host, self.port, self.timeout, self.engine))
        if not info.asr:
            raise WyomingError(f"{self.engine}: this Wyoming server offers no speech "
                               "recognition (is it a TTS server?)")
        program = info.asr[0]
        model = program.models[0].name if program.models else "?"
        self.server = f"{program.name} {program.version or ''} ({model})".replace("  ", " ")
        if self.gate is not None:
            self.gate.load()
        self._send(np.zeros(int(SAMPLE_RATE * _WARMUP_SECONDS), dtype=np.float32))
        self._loaded = True
        log.info("wyoming ASR %s: %s", self.engine, self.server)

    def transcribe(self, audio: np.ndarray) -> str:
        """Text of one utterance (float32 mono 16 kHz), "" if it holds no speech; blocking."""
        samples = np.asarray(audio, dtype=np.float32).reshape(-1)
        if samples.size == 0:
            return ""
        if self.gate is not None:
            verdict, _evidence = self.gate.before_asr(samples)
            if not verdict.speech:
                log.info("speech gate: %s", verdict.reason)
                return ""
        return self._send(samples).strip()

    def _send(self, samples: np.ndarray) -> str:
        from wyoming.asr import Transcribe, Transcript
        from wyoming.audio import AudioChunk, AudioStart, AudioStop
        from wyoming.error import Error

        pcm = (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()
        fmt = {"rate": SAMPLE_RATE, "width": 2, "channels": 1}
        started = time.monotonic()
        with self._connect() as conn:
            connected = time.monotonic()
            step = CHUNK_SAMPLES * 2
            conn.write(Transcribe(language=self.language or None).event(),
                       AudioStart(**fmt).event(),
                       *(AudioChunk(audio=pcm[i:i + step], **fmt).event()
                         for i in range(0, len(pcm), step)),
                       AudioStop().event())
            sent = time.monotonic()
            while True:
                event = conn.read()
                if Transcript.is_type(event.type):
                    text = Transcript.from_event(event).text
                    break
                if Error.is_type(event.type):
                    raise WyomingError(f"{self.engine}: {Error.from_event(event).text}")
        done = time.monotonic()
        self.last_call = AsrCall(round((connected - started) * 1000, 2),
                                 round((sent - connected) * 1000, 2),
                                 round((done - sent) * 1000, 2))
        return text

    def _connect(self) -> Connection:
        return Connection(self.host, self.port, self.timeout, self.engine)

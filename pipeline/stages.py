"""The engines a turn plugs in, as the turn sees them: something that transcribes and
something that speaks.

The engines a command plugs in (services/engines.py) are in-process
(``pipeline.asr.WhisperAsr``, ``pipeline.tts.PiperTts``) or a Wyoming server
(``pipeline.wyoming_asr``, ``pipeline.wyoming_tts``). Both kinds are blocking and run in
worker threads, so the turn treats them alike; ``engine`` ("local" or
"wyoming://HOST:PORT") goes into asr.start and tts.start.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


class Transcriber(Protocol):
    def transcribe(self, audio: np.ndarray) -> str: ...


class Recognition(Protocol):
    text: str
    avg_logprob: float
    last_word_prob: float | None

    @property
    def redone(self) -> str: ...  # how a looped decode was redone ("" if it was not)


@runtime_checkable
class ConfidentTranscriber(Protocol):
    """A transcriber that also says how sure it was (``pipeline.asr.WhisperAsr``): the
    live endpoint policy trusts Whisper's punctuation only when Whisper was sure."""

    def transcribe(self, audio: np.ndarray) -> str: ...

    def recognize(self, audio: np.ndarray) -> Recognition: ...


class Synthesizer(Protocol):
    sample_rate: int

    def synthesize(self, text: str) -> np.ndarray: ...

    def abort(self, thread_id: int | None = None) -> None:
        """Stop the synthesis running in ``thread_id`` now (barge-in)."""


class AsrEngine(Transcriber, Protocol):
    engine: str

    def load(self) -> None: ...


class TtsEngine(Synthesizer, Protocol):
    engine: str

    def load(self) -> None: ...


def engine_of(stage: object) -> str:
    """The ``engine`` of an ASR/TTS object ("local" for fakes that do not say)."""
    return str(getattr(stage, "engine", "local"))

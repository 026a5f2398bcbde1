"""Early transcription: Whisper starts on the words so far at a short gap, before the pause.

The speculative turn starts at the user's first 200 ms pause (``pipeline.live``), and its
first job is Whisper: 100-250 ms on these machines, all of it on the critical path. But the
audio that turn will transcribe is known earlier: once ~100 ms of silence follow the last
voiced window (``SpeechGap``), only more silence can come before the pause. So the live
turn-taker starts the transcription there, in a thread, and the turn started at the pause
waits for that result (``TurnRunner.run(early=...)``) instead of starting Whisper again,
provided nothing was voiced in between: the same last voiced sample.

When the voice comes back first, the result is thrown away. Whisper then ran while the
user was speaking, when the cores are otherwise idle, and it kept the engine warm.

The early audio ends with the gap's silence (~100 ms) rather than the pause's (~200 ms);
Whisper's fitted window pads seconds of silence after either, so the words are the same.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class AsrResult:
    """What a transcriber said of one utterance; ``avg_logprob`` and ``last_word_prob``
    when it says how sure it was (in-process Whisper; a Wyoming transcript carries no
    confidence)."""

    text: str
    avg_logprob: float | None = None
    last_word_prob: float | None = None
    # How a decode that looped was mended: "cut" (where the repeat began), "fitted" (more
    # silence) or "full" (30 s window).
    redone: str = ""
    # Audio the echo canceller changed (the user spoke over the reply): "sure" (Whisper
    # was sure of the cancelled audio), else decoded both ways and the one kept,
    # "cancelled" or "microphone"; "" for audio the canceller left alone.
    double_talk: str = ""


@dataclass
class EarlyTranscript:
    """A transcription of the utterance so far, started at a gap, running in a thread."""

    end_sample: int  # the last voiced sample of the audio it transcribes
    audio: np.ndarray = field(repr=False)
    started: float  # time.monotonic() when Whisper started
    task: asyncio.Task[AsrResult] = field(repr=False)

    @classmethod
    def start(cls, recognize: Callable[[np.ndarray], AsrResult], audio: np.ndarray,
              end_sample: int,
              spawn: Callable[[str, Coroutine[Any, Any, AsrResult]], asyncio.Task[AsrResult]],
              ) -> EarlyTranscript:
        """Start ``recognize(audio)`` in a worker thread through the caller's task set."""
        started = time.monotonic()
        task = spawn(f"early-asr{end_sample}", asyncio.to_thread(recognize, audio))
        # Nobody may await a discarded one: read its exception so asyncio does not log it.
        task.add_done_callback(_retrieve)
        return cls(end_sample, audio, started, task)

    def matches(self, end_sample: int) -> bool:
        """Is this the transcription of an utterance that ends at ``end_sample``?"""
        return self.end_sample == end_sample

    @property
    def running(self) -> bool:
        return not self.task.done()

    async def result(self) -> AsrResult:
        # Shielded: a turn cancelled while it waits must not cancel the shared thread task.
        return await asyncio.shield(self.task)


def _retrieve(task: asyncio.Task[AsrResult]) -> None:
    if not task.cancelled():
        task.exception()

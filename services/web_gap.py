"""Whisper from the page's gap: ``audio.gap`` starts the transcription a pause's turn takes.

``talk`` starts Whisper at a 96 ms gap, before the 200 ms pause that starts the speculative
turn (``pipeline/early_asr.py``, docs/live.md "Whisper from the gap"). The page does the
same with its own cuts: after 100 ms of silence inside an utterance it sends ``audio.gap``
with ``voiced_ms``, the voice it has heard in the utterance so far, and the server starts
Whisper and the pitch cue on the audio received so far, in threads (``PageGap``). The
``audio.pause`` that follows carries ``voiced_ms`` too: the same number means nothing was
voiced in between (only silence came after the gap's audio), so the speculative turn
takes the gap's transcript instead of running Whisper again. Any other pause, or none,
leaves it unused: it ran while the user spoke, and its result is dropped.

``PageSpeculator`` (services/web_live.py) decides when a gap starts one and which pause
takes it; this module only runs it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from pipeline.audio_in import SAMPLE_RATE
from pipeline.early_asr import AsrResult, EarlyTranscript
from pipeline.prosody import ProsodyCue, final_cue

log = logging.getLogger(__name__)

T = TypeVar("T")
_numbers = itertools.count(1)


class Spawn(Protocol):
    """``TaskSet.spawn``: the caller's tasks, cancelled with its conversation."""

    def __call__(self, name: str, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]: ...


@dataclass(frozen=True)
class GapStart:
    """What a gap started, once its audio is decoded: Whisper and the pitch, in threads."""

    transcript: EarlyTranscript
    cue: asyncio.Task[ProsodyCue] = field(repr=False)


@dataclass
class PageGap:
    """Whisper on the open utterance up to an ``audio.gap``."""

    owner: object  # the utterance it belongs to (compared by identity)
    voiced_ms: float  # the page's voice in that utterance when it sent the gap
    task: asyncio.Task[GapStart] = field(repr=False)  # decoding, then the two threads

    @classmethod
    def start(cls, owner: object, voiced_ms: float, silence_ms: float,
              decode: Callable[[], np.ndarray], recognize: Callable[[np.ndarray], AsrResult],
              spawn: Spawn) -> PageGap:
        """Decode the audio so far (``decode``, blocking) in a thread, then start
        ``recognize`` and the pitch cue on it in two more, through the caller's task set."""
        n = next(_numbers)

        async def begin() -> GapStart:
            audio = await asyncio.to_thread(decode)
            # The last voiced sample, by the page's count of the silence since (a name for
            # the task; the pause is matched by voiced_ms).
            end = max(0, len(audio) - round(silence_ms * SAMPLE_RATE / 1000))
            early = EarlyTranscript.start(recognize, audio, end, spawn)
            cue = spawn(f"gap-pitch{n}", asyncio.to_thread(final_cue, audio))
            cue.add_done_callback(_retrieve)
            return GapStart(early, cue)

        task = spawn(f"gap{n}", begin())
        task.add_done_callback(_retrieve)
        return cls(owner, voiced_ms, task)

    def matches(self, owner: object, voiced_ms: float | None) -> bool:
        """Is a pause in ``owner`` with ``voiced_ms`` of voice about the same words?"""
        return self.owner is owner and voiced_ms is not None and voiced_ms == self.voiced_ms

    @property
    def running(self) -> bool:
        """Decoding, or Whisper still at work on it."""
        if not self.task.done():
            return True
        return (not self.task.cancelled() and self.task.exception() is None
                and self.task.result().transcript.running)

    async def started(self) -> GapStart | None:
        """Whisper and the pitch, once started; None if the audio could not be decoded
        (the turn then runs Whisper itself, and meets the same error there)."""
        try:
            return await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if self.task.cancelled():  # the conversation is closing
                return None
            raise
        except Exception as e:
            log.info("gap transcription not started: %s", e)
            return None


def _retrieve(task: asyncio.Task[Any]) -> None:
    # Nobody may await a discarded one: read its exception so asyncio does not log it.
    if not task.cancelled():
        task.exception()

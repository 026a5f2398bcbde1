"""The microphone's own samples beside the echo-cancelled ones, for Whisper.

Over open speakers the segmenter hears the echo canceller's output. Where the user spoke
over the reply (double talk: a barge-in, words said before the reply ended), AEC3 bends
their words: on the same barging utterances Whisper's word error rate was 0.145 on the
cancelled audio alone against 0.085 when it also decoded the microphone's own and kept the
transcript it was surer of (a user 12 dB up: 0.185 against 0.072; scripts/bench_echo_guard.py
--words, docs/talk.md). ``MicTape`` keeps the last ``seconds`` of the microphone's own samples on
the segmenter's sample count, so an utterance or a pause that overlapped playback carries
both (``attach``); the turn transcribes both when Whisper was unsure of the cancelled one
(``recognize_over_reply``, in ``pipeline.turn.TurnRunner.recognize``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

import numpy as np

from pipeline.audio_in import SAMPLE_RATE
from pipeline.mic import MicBlock, SpeechSoFar, UtteranceEnd
from pipeline.stages import Recognition

Span = TypeVar("Span", bound=SpeechSoFar | UtteranceEnd)
Heard = TypeVar("Heard", bound=Recognition)


# Whisper's average log-probability on the cancelled audio at or above which the
# microphone's own is not decoded: on the bench's barging utterances a second decode below
# it gave the same word error rate as always decoding both, with half the decodes
# (docs/talk.md, "Words said over the reply").
SURE_LOGPROB = -0.2


def recognize_over_reply(recognize: Callable[[np.ndarray], Heard], cancelled: np.ndarray,
                         own: np.ndarray | None) -> tuple[Heard, str]:
    """Whisper on audio the echo canceller changed: the cancelled audio, then, unless
    Whisper was sure of it, the microphone's own; the surer transcript is kept. With it,
    what happened: "" (no ``own``: one version), "sure" (one decode was enough),
    "cancelled" or "microphone" (the one kept of two)."""
    heard = recognize(cancelled)
    if own is None:
        return heard, ""
    if not heard.text.strip() or heard.avg_logprob >= SURE_LOGPROB:
        return heard, "sure"
    return surer(heard, recognize(own))


def surer(cancelled: Heard, own: Heard) -> tuple[Heard, str]:
    """Of the echo-cancelled audio's transcript and the microphone's own, the one Whisper
    was surer of (its average log-probability), and which it was. No words in the
    cancelled audio stays no words: the microphone's own may hold only the echo, and
    answering it would be the assistant answering itself."""
    if (cancelled.text.strip() and own.text.strip()
            and own.avg_logprob > cancelled.avg_logprob):
        return own, "microphone"
    return cancelled, "cancelled"


class MicTape:
    """The microphone's own samples by stream position (the samples fed to the segmenter),
    and where the canceller changed them while something played."""

    def __init__(self, seconds: float = 35.0) -> None:
        # longer than the longest utterance (30 s); a ring, written in place every block
        self._ring = np.zeros(int(seconds * SAMPLE_RATE), np.float32)
        self.end = 0  # stream position after the last sample appended
        self._changed: list[tuple[int, int]] = []  # [start, end) spans the canceller changed

    def append(self, block: MicBlock) -> None:
        own = block.samples if block.uncancelled is None else block.uncancelled
        own = np.asarray(own, dtype=np.float32).reshape(-1)[-self._ring.size:]
        start, self.end = self.end, self.end + own.size
        if block.uncancelled is not None:
            if self._changed and self._changed[-1][1] == start:
                self._changed[-1] = (self._changed[-1][0], self.end)
            else:
                self._changed.append((start, self.end))
        at = start % self._ring.size
        first = min(own.size, self._ring.size - at)
        self._ring[at:at + first] = own[:first]
        self._ring[:own.size - first] = own[first:]
        oldest = self.end - self._ring.size
        while self._changed and self._changed[0][1] <= oldest:
            self._changed.pop(0)

    def uncancelled(self, start: int, size: int) -> np.ndarray | None:
        """The microphone's own samples of ``[start, start + size)`` if the canceller
        changed any of them while something played, else None (the two are the same)."""
        end = start + size
        if not any(a < end and start < b for a, b in self._changed):
            return None
        if start < self.end - self._ring.size or end > self.end or size <= 0:
            return None  # no longer (or not yet) on the tape
        index = np.arange(start, end) % self._ring.size
        return self._ring[index]

    def attach(self, span: Span) -> Span:
        """``span`` with its ``uncancelled`` audio, when there is one."""
        own = self.uncancelled(span.start_sample, span.audio.size)
        return span if own is None else replace(span, uncancelled=own)

"""Barge-in: the one task that decides that the user interrupted the assistant.

Whatever the source - microphone speech while the assistant talks, a scripted time in
replay, the browser's interrupt message - the decision is made here and carried out by
``TurnRunner.interrupt()`` (silence, drop TTS, hang up on the LLM, confirm the slot idle).

The microphone source (``BargeIn.watch``) is the only reader of the microphone: it feeds
the utterance segmenter, hands finished utterances to the conversation, and triggers
when the user talks over the assistant for long enough - or goes on talking after the end
was taken, before a word of the reply was played (the end was a pause: the reply being
prepared answers half a request, and the words go on with the rest, pipeline/rejoin.py).
With open speakers the assistant's own voice reaches the microphone too, so during
playback the ``EchoGuard`` asks for more: a higher VAD probability, a level clearly above
the echo that the current playback would produce, and longer speech (docs/talk.md has the
measurements).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from pipeline.events import Event, EventName

if TYPE_CHECKING:
    from pipeline.mic import GuardedGate, MicBlock, SegmentEvent, UtteranceEnd, UtteranceSegmenter

log = logging.getLogger(__name__)


_SILENT = (EventName.PLAYBACK_END, EventName.PLAYBACK_STOPPED, EventName.TURN_END)


class Interruptible(Protocol):
    def interrupt(self, source: str = "user") -> bool: ...


class PlaybackLevel(Protocol):
    """How loud the speaker was just before ``t`` (``PlaybackTap`` in the product)."""

    def level(self, t: float) -> float: ...


class BargeIn:
    def __init__(self, target: Interruptible, *, cut_prepared: bool = True) -> None:
        self.target = target
        self.cut_prepared = cut_prepared  # False: the voice cuts only a reply that plays
        self._playback_started = asyncio.Event()
        self._playbacks = 0  # playback.start events seen: tells this turn's from the last's
        self.speaking = False  # between this turn's playback.start and its end
        # A turn whose end is taken prepares a reply, nothing played yet. Not while it is
        # an unconfirmed speculation: voice then is the utterance going on (SpeechResumed
        # cancels it, pipeline/live.py), not a new one.
        self.preparing = False
        self._unconfirmed = False
        self.detections = 0

    @property
    def listening(self) -> bool:
        """Would the user's voice now cut a reply (being played or prepared)?"""
        return self.speaking or (self.cut_prepared and self.preparing
                                 and not self._unconfirmed)

    def on_event(self, ev: Event) -> None:
        """Event listener: follows the turn so sources know when the assistant speaks."""
        if ev.name == EventName.TURN_START:
            self._playback_started.clear()
            self.preparing, self._unconfirmed = True, False
        elif ev.name == EventName.SPECULATION_START:
            self._unconfirmed = True
        elif ev.name == EventName.SPECULATION_CONFIRMED:
            self._unconfirmed = False
        elif ev.name == EventName.PLAYBACK_START:
            self._playbacks += 1
            self._playback_started.set()
            self.speaking, self.preparing = True, False
        elif ev.name in _SILENT:
            self.speaking = self.preparing = False

    def trigger(self, source: str) -> bool:
        fired = self.target.interrupt(source)
        self.detections += fired
        return fired

    async def scripted(self, at_s: float) -> None:
        """Interrupt ``at_s`` seconds after this turn's playback starts (replay).

        Started just before the turn, it waits for a playback.start newer than the last
        one seen: the event of the previous turn's playback may still be set (it is
        cleared at turn.start, which can come after this task first runs)."""
        seen = self._playbacks
        while self._playbacks == seen:
            await self._playback_started.wait()
            if self._playbacks == seen:  # the previous turn's, still set: wait for ours
                self._playback_started.clear()
        await asyncio.sleep(at_s)
        self.trigger(f"scripted@{at_s:g}s")

    async def watch(self, mic: AsyncIterable[MicBlock], segmenter: UtteranceSegmenter,
                    on_utterance: Callable[[UtteranceEnd, bool], None], *,
                    detector: SustainedSpeech, tap: PlaybackLevel | None = None,
                    guard: EchoGuard | None = None,
                    on_segment: Callable[[SegmentEvent], None] | None = None) -> None:
        """The microphone source: runs for the whole conversation.

        ``on_utterance(utterance, during_playback)`` gets every finished utterance;
        ``during_playback`` says it began while the assistant was speaking and did not
        barge in (a backchannel or leaked echo: the caller usually ignores it).
        """
        from pipeline.mic import WINDOW_MS, SpeechSoFar, SpeechStart, UtteranceEnd
        from pipeline.mic_tape import MicTape

        tape = MicTape()  # the microphone's own samples, where the canceller changed them
        in_playback = barged_in = False  # about the utterance in progress
        async for block in mic:
            tape.append(block)
            play_rms = tap.level(block.t) if tap is not None else 0.0
            guarded = guard is not None and guard.enabled and play_rms > 0.0
            gate = guard.gate(play_rms) if guard is not None and guarded else None
            events = segmenter.feed(block.samples, gate)
            for _prob, rms, voiced in segmenter.windows:
                if guard is not None and guarded:
                    guard.observe(rms, play_rms, voiced, user_speaking=segmenter.in_speech)
                required = detector.min_ms + (guard.extra_ms if guard and guarded else 0.0)
                if detector.window(voiced and self.listening, WINDOW_MS, required):
                    log.info("barge-in: %.0f ms of speech (%s, guarded=%s, playback rms "
                             "%.3f, mic rms %.3f, echo estimate %.2f)", detector.voiced_ms,
                             "playing" if self.speaking else "before playback", guarded,
                             play_rms, rms, guard.coupling if guard is not None else 0.0)
                    barged_in = self.trigger("mic") or barged_in
            for ev in events:
                if isinstance(ev, SpeechSoFar | UtteranceEnd):
                    ev = tape.attach(ev)
                if on_segment is not None:
                    on_segment(ev)
                if isinstance(ev, SpeechStart):
                    in_playback, barged_in = self.speaking, False
                elif isinstance(ev, UtteranceEnd):
                    on_utterance(ev, in_playback and not barged_in)
                    in_playback = barged_in = False
            if not self.listening:
                detector.reset()


class SustainedSpeech:
    """Pure: has the user been talking for ``required`` ms? Gaps shorter than ``gap_ms``
    (between syllables and words) do not reset the count; a longer pause does.

    The requirement may change from window to window (the echo guard asks for more while
    something plays, and playback pauses between sentences), so the detector fires the
    first time the count *is* at or above it, not only when the count crosses it: speech
    that had already passed the plain minimum when the guard let go still interrupts."""

    def __init__(self, min_ms: float = 300.0, gap_ms: float = 250.0) -> None:
        self.min_ms, self.gap_ms = min_ms, gap_ms
        self.voiced_ms = 0.0
        self._gap = 0.0
        self._fired = False  # for the speech in progress

    def reset(self) -> None:
        self.voiced_ms, self._gap, self._fired = 0.0, 0.0, False

    def window(self, voiced: bool, ms: float, required: float | None = None) -> bool:
        """Account one window; True once per stretch of speech, when the requirement is
        first met."""
        need = self.min_ms if required is None else required
        self.account(voiced, ms)
        if self._fired or self.voiced_ms < need:
            return False
        self._fired = True
        return True

    def account(self, voiced: bool, ms: float) -> None:
        """Count one window of speech or silence; a long enough gap starts over."""
        if voiced:
            self.voiced_ms += ms
            self._gap = 0.0
        else:
            self._gap += ms
            if self._gap >= self.gap_ms:
                self.voiced_ms, self._fired = 0.0, False


@dataclass
class EchoGuard:
    """Decides, during playback, whether the microphone hears the user or the assistant.

    A window counts as the user only if Silero is more certain (``threshold``), the level
    is above an absolute floor, and it is ``margin`` times louder than the echo the current
    playback level would explain. The echo path gain (``coupling`` = mic rms / playback rms)
    is learned from playback windows the guard rejected, so it follows the room and the
    volume; speech the guard accepts, and the rest of an utterance it let through, never
    raise it (the user cannot lock themselves out).
    ``extra_ms`` more speech is required than without playback. ``enabled=False``
    (``--headphones``) turns all of this off.
    """

    enabled: bool = True
    threshold: float = 0.8
    margin: float = 2.0
    min_rms: float = 0.01
    extra_ms: float = 200.0
    onset_threshold: float = 0.35  # Silero's continuation threshold (SegmenterConfig)
    coupling: float = 0.5  # until measured: assume a loud echo (half the playback level)
    history: int = 150  # rejected windows kept (about 5 s of playback)

    def __post_init__(self) -> None:
        self._ratios: deque[float] = deque(maxlen=self.history)

    @classmethod
    def behind_canceller(cls) -> EchoGuard:
        """The guard behind the echo canceller (``pipeline.echo_cancel``): the level test
        alone, against the echo the canceller leaves (learned as always), with Silero's
        usual 0.5 and no extra speech. The stricter threshold and the extra 200 ms are for
        echo loud enough to pass the level test, which the canceller takes out
        (scripts/bench_echo_guard.py, docs/talk.md)."""
        return cls(threshold=0.5, extra_ms=0.0)

    def echo_rms(self, play_rms: float) -> float:
        return self.coupling * play_rms

    def accepts(self, prob: float, rms: float, play_rms: float) -> bool:
        if not self.enabled:
            return True
        return (prob >= self.threshold and rms >= self.min_rms
                and rms >= self.margin * self.echo_rms(play_rms))

    def onset(self, prob: float, rms: float, play_rms: float) -> bool:
        """The softer test of the windows just before speech the guard accepted: Silero's
        continuation threshold, and louder than the echo estimate alone (not ``margin``
        times): the user's first syllables over the reply, which the segmenter keeps."""
        if not self.enabled:
            return True
        return (prob >= self.onset_threshold and rms >= self.min_rms / 2
                and rms >= self.echo_rms(play_rms))

    def gate(self, play_rms: float) -> GuardedGate:
        from pipeline.mic import GuardedGate

        return GuardedGate(lambda prob, rms: self.accepts(prob, rms, play_rms),
                           lambda prob, rms: self.onset(prob, rms, play_rms))

    def observe(self, rms: float, play_rms: float, accepted: bool, *,
                user_speaking: bool = False) -> None:
        """Learn the echo path from what the guard judged to be echo.

        Not while an utterance the guard let through goes on (``user_speaking``): its
        quieter syllables, rejected, are the user over the echo, not the echo. Learnt from,
        they raised the estimate within a second or two until the user was rejected for
        good (scripts/bench_echo_guard.py: a user 12 dB up, early in a reply)."""
        if accepted or play_rms < 0.01 or user_speaking:
            return
        self._ratios.append(rms / play_rms)
        if len(self._ratios) >= 15:  # half a second of playback before trusting it
            # a high percentile: echo is peaky, and a missed echo costs a false barge-in
            self.coupling = float(np.percentile(self._ratios, 90))

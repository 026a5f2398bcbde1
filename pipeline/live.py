"""Live turn-taking: start the turn at the user's first pause, play it only at the endpoint.

A person answers a question about as soon as it ends; a pipeline that waits a fixed 600 ms
of silence and only then starts Whisper, the model and the voice answers a second later.
So the turn starts *speculatively* at the first short pause (``SegmenterConfig.pause_ms``,
200 ms): Whisper, the LLM request and the first sentence's TTS all run, but the sink stays
closed (``TurnRunner.run(confirmed=...)``). Meanwhile the speculative transcript tells the
``EndpointPolicy`` how long to wait for more ("Why is the sky blue?" -> 500 ms; "about
the" -> 1.1 s; the voice's pitch at the pause is measured for it too), and the segmenter
ends the utterance after that much silence:

- the utterance ends -> the speculation is confirmed and plays from where it already is;
- the user speaks again first -> ``TurnRunner.abandon()``: the same verified hang-up as a
  barge-in (stream closed, slot confirmed idle), nothing played, nothing in the history;
  the next pause speculates again on the longer utterance.

A reply cut by the user's voice before ``MIN_KEPT_WORDS`` of it were heard is not kept,
and its question goes with it (``pipeline.heard.worth_keeping``); most often it answered a
pause taken for the end ("Call my sister." [pause] "after lunch."). So those words are
carried into the next utterance's turn (``rejoin_s``; the bookkeeping, shared with the
browser page, is pipeline/rejoin.py): its user message is "Call my sister. After lunch.",
and nothing the user said is lost.

``LiveTurnTaker`` is fed by the one microphone reader (``BargeIn.watch``): ``on_segment``
for every segmenter event and ``on_utterance`` for every finished utterance (one that began
over the reply and did not barge in is not a turn: only its speculation is dropped). It
runs the turns one after another and reports each finished one to ``on_turn`` with a
``LiveTurn`` (the endpoint wait and what speculation did). ``speculate=False`` is today's
behaviour: a turn per finished utterance, a fixed end silence.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any, Protocol

from pipeline.audio_in import SAMPLE_RATE
from pipeline.early_asr import EarlyTranscript
from pipeline.endpoint import EndpointDecision, EndpointPolicy
from pipeline.events import Event, EventName
from pipeline.mic import (
    SegmentEvent,
    SpeechGap,
    SpeechPause,
    SpeechResumed,
    SpeechSoFar,
    SpeechStart,
    UtteranceEnd,
)
from pipeline.pauses import PauseHabit
from pipeline.prosody import ProsodyCue, final_cue
from pipeline.rejoin import REJOIN_S, CutWords, Rejoined
from pipeline.tasks import TaskSet
from pipeline.turn import TurnResult, TurnRunner
from pipeline.warm import EngineWarmer

log = logging.getLogger(__name__)


class EndSetter(Protocol):
    """What the taker needs of the segmenter: set the current utterance's end silence (held
    until the speculative reply is ready), end it now, and how long the voice has been off
    (the engines are warmed only while it is on)."""

    def end_after(self, silence_ms: float | None, *, held: bool = False) -> None: ...

    def release_end(self) -> None: ...

    def end_now(self) -> UtteranceEnd | None: ...

    @property
    def silence_ms(self) -> float: ...


# How long the endpoint decision waits for the turn's LLM request before deciding anyway.
_REQUEST_WAIT_S = 0.5
# A warm pass starts only this soon after a voiced window, so it ends (~60-100 ms) before
# the 200 ms pause that starts the speculative turn.
_WARM_WHILE_SILENT_MS = 64


@dataclass
class SpeculationStats:
    started: int = 0
    confirmed: int = 0
    cancelled: int = 0
    cancelled_idle_confirmed: int = 0  # cancelled ones whose slot was seen idle afterwards
    saved_ms: list[float] = field(default_factory=list)  # work done before the endpoint
    wasted_tokens: int = 0  # generated for speculations that were dropped
    early_asr_started: int = 0  # transcriptions started at a gap (pipeline/early_asr.py)
    early_asr_used: int = 0  # ...that a speculative turn took instead of running Whisper

    @classmethod
    def total(cls, runs: Iterable[SpeculationStats]) -> SpeculationStats:
        """The counts of several conversations summed (their saved times pooled)."""
        out = cls()
        for run in runs:
            for f in fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(run, f.name))
        return out

    def to_dict(self) -> dict[str, object]:
        saved = sorted(self.saved_ms)
        return {"started": self.started, "confirmed": self.confirmed,
                "cancelled": self.cancelled,
                "cancelled_idle_confirmed": self.cancelled_idle_confirmed,
                "saved_ms_p50": round(saved[len(saved) // 2]) if saved else None,
                "wasted_tokens": self.wasted_tokens,
                "early_asr_started": self.early_asr_started,
                "early_asr_used": self.early_asr_used}


@dataclass(frozen=True)
class LiveTurn:
    result: TurnResult
    speech_end_ms: float  # last voiced sample -> t = 0 of the turn (on the mic's clock)
    endpoint_ms: float  # last voiced sample -> the end was confirmed
    speculative: bool  # started at a pause, before the endpoint

    @property
    def first_audio_from_speech_end_ms(self) -> float | None:
        """Mouth to ear on the pipeline's clocks (the benchmark measures it on the audio)."""
        return self.result.metrics.first_audio_from_speech_end_ms


def judge_endpoint(policy: EndpointPolicy, runner: TurnRunner, asr_end: Event,
                   cue: ProsodyCue, pauses: PauseHabit | None = None) -> EndpointDecision:
    """The policy on a speculative transcript (its words, Whisper's confidence in them and
    in the last word, the pitch at the pause), recorded in the running turn as
    ``speculation.endpoint``.

    After a cut turn's words were rejoined, the policy still judges the new words alone
    (``asr.end``'s ``text``): the confidence and the pitch are of this audio only, the
    last word and its punctuation are the same in the joined text, and a short
    continuation ("after lunch.") keeps the longer wait for few words, which suits a user
    who has just shown they pause inside a request.

    ``pauses``: this user's own pauses after finished-looking words lengthen the wait
    after them (``complete_ms``, recorded in the event; pipeline/pauses.py)."""
    base = policy.complete_ms
    if pauses is not None:
        policy = pauses.policy(policy)
    logprob, word = asr_end.data.get("avg_logprob"), asr_end.data.get("last_word_prob")
    decision = policy.decide(str(asr_end.data.get("text", "")),
                             float(logprob) if logprob is not None else None, cue,
                             float(word) if word is not None else None)
    learned = policy.complete_ms != base
    runner.note(EventName.ENDPOINT, wait_ms=decision.wait_ms, reason=str(decision.reason),
                pitch_fall_st=round(cue.fall_st, 1), complete_ms=policy.complete_ms,
                learned=learned)
    return replace(decision, learned=learned and decision.looks_finished)


def _silence_ms(detected_sample: int, end_sample: int) -> float:
    return (detected_sample - end_sample) * 1000 / SAMPLE_RATE


def _voice_began(ev: SpeechSoFar | UtteranceEnd) -> float:
    """When (``time.monotonic()``) the utterance's voice began: events come from the mic
    reader as they are detected, so its start is that many samples before now."""
    return time.monotonic() - (ev.detected_sample - ev.start_sample) / SAMPLE_RATE


@dataclass
class _Speculation:
    pause: SpeechPause
    t0: float
    began: float  # when the utterance's voice began (the rejoin bound)
    confirmed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None
    cancelled: bool = False
    endpoint_ms: float | None = None
    cue: asyncio.Future[ProsodyCue] | None = None  # the pitch at the pause, in a thread
    early: EarlyTranscript | None = None  # Whisper on these words, started at a gap
    turn: int | None = None  # its turn number, once it runs
    wait_ms: int | None = None  # the endpoint policy's silence for it, once judged
    looks_finished: bool = False  # judged a whole question or sentence
    ready: bool = False  # its first audio is synthesized: it could be heard now
    requested: asyncio.Event = field(default_factory=asyncio.Event)  # its LLM request went


class LiveTurnTaker:
    def __init__(self, runner: TurnRunner, segmenter: EndSetter, *,
                 on_turn: Callable[[LiveTurn], None], speculate: bool = True,
                 policy: EndpointPolicy | None = None, keep_warm: bool = True,
                 rejoin_s: float | None = REJOIN_S,
                 pauses: PauseHabit | None = None) -> None:
        self.runner, self.segmenter, self.on_turn = runner, segmenter, on_turn
        self.speculate = speculate
        # None: a cut turn's words are dropped with its reply, as before.
        self.cuts = CutWords(rejoin_s)  # the words of the last cut turn, not kept
        self._closing = False
        self.policy = policy or EndpointPolicy()
        # This user's pauses after finished-looking words (pipeline/pauses.py); None: the
        # policy's own wait always.
        self.pauses = pauses
        self._last_end_sample: int | None = None  # where the last utterance's voice ended
        self._gap_before_ms: float | None = None  # silence before this utterance's voice
        self._gap_learned = False  # told to ``pauses`` (once, when its words are carried)
        self.stats = SpeculationStats()
        self.tasks = TaskSet("live")
        self._spec: _Speculation | None = None
        self._previous: asyncio.Task[None] | None = None  # the last turn, finishing
        # Whisper and the pitch on the words before the last gap (pipeline/early_asr.py).
        self._early: EarlyTranscript | None = None
        self._early_cue: asyncio.Future[ProsodyCue] | None = None
        # speculation.confirmed of a speculation confirmed before its turn started.
        self._confirmed_unstarted: dict[str, int] | None = None
        self._count = 0
        runner.listeners.append(self._on_event)
        # Whisper and Piper, kept warm while the user speaks (pipeline/warm.py).
        self.warmer = (EngineWarmer([runner.asr, runner.tts], ready=self._warm_now)
                       if keep_warm else None)

    # -- fed by the microphone reader (synchronous: never blocks the mic) ----------------
    def on_segment(self, ev: SegmentEvent) -> None:
        if self.warmer is not None:
            if isinstance(ev, (SpeechStart, SpeechResumed)):
                self.warmer.speaking()
            elif isinstance(ev, SpeechPause):
                self.warmer.silent()
        if isinstance(ev, SpeechStart):
            self._voice_again(ev)
        if isinstance(ev, SpeechGap) and self.speculate and not self._turn_running():
            self._start_early(ev)
        elif isinstance(ev, SpeechPause) and self.speculate and not self._turn_running():
            self._start_speculation(ev)
        elif isinstance(ev, SpeechResumed) and self._spec is not None:
            if self.pauses is not None and self._spec.looks_finished:
                self.pauses.went_on(ev.pause_ms)  # a near miss: finished-looking, not done
            self._cancel_speculation(f"speech resumed after {ev.pause_ms:.0f} ms")

    def _voice_again(self, start: SpeechStart) -> None:
        """Remember the silence since the last utterance: if this one carries a cut turn's
        words, that silence was a pause inside the request taken for its end."""
        last = self._last_end_sample
        self._gap_before_ms = (None if last is None
                               else (start.sample - last) * 1000 / SAMPLE_RATE)
        self._gap_learned = False

    def _rejoined(self, began: float) -> Rejoined | None:
        """``CutWords.rejoined``, and the pause before them told to ``pauses``."""
        rejoined = self.cuts.rejoined(began)
        if (rejoined is not None and self.pauses is not None and not self._gap_learned
                and self._gap_before_ms is not None):
            self._gap_learned = True
            self.pauses.went_on(self._gap_before_ms)
        return rejoined

    def _warm_now(self) -> bool:
        # Never next to a turn (its own engines are hot and it needs the cores), and only
        # while the voice is on.
        return (not self.runner.busy and self._spec is None
                and self.segmenter.silence_ms <= _WARM_WHILE_SILENT_MS)

    def on_utterance(self, utterance: UtteranceEnd, during_playback: bool = False) -> None:
        """The utterance ended. ``during_playback``: it began over the assistant's reply
        and did not barge in (a backchannel, leaked echo): not a turn, and a speculation
        started at its pause is dropped, or it would wait for a confirmation that never
        comes, holding every later turn (a live replay hung on one for 180 s)."""
        if self.warmer is not None:
            self.warmer.silent()
        if during_playback:
            self._cancel_speculation("speech over the reply, not a turn")
            return
        self._last_end_sample = utterance.end_sample
        if self.pauses is not None:
            self.pauses.utterance_ended()
        endpoint_ms = _silence_ms(utterance.detected_sample, utterance.end_sample)
        spec = self._spec
        if spec is not None and not spec.cancelled:
            self._confirm(spec, endpoint_ms)
            return
        self._chain(self._turn(utterance, time.monotonic(), endpoint_ms,
                               _voice_began(utterance)), "turn")

    def _confirm(self, spec: _Speculation, endpoint_ms: float) -> None:
        self._spec = None
        spec.endpoint_ms = endpoint_ms
        spec.confirmed.set()
        self.stats.confirmed += 1
        ahead = (time.monotonic() - spec.t0) * 1000
        self.stats.saved_ms.append(ahead)
        note = {"endpoint_ms": round(endpoint_ms), "ahead_ms": round(ahead)}
        if spec.turn is None:
            # Still queued behind the last turn: recorded in its own turn once it starts.
            self._confirmed_unstarted = note
        else:
            self.runner.note(EventName.SPECULATION_CONFIRMED, **note)

    async def close(self, grace_s: float = 3.0) -> None:
        """End the conversation: a running turn is closed the way barge-in closes it
        (stream closed, slot confirmed idle, what was heard kept), then the rest stops."""
        if self.warmer is not None:
            self.warmer.silent()
        self._closing = True  # this interrupt is not the user's voice: nothing to rejoin
        if self._spec is not None:
            self._cancel_speculation("conversation ended")
        if self.runner.interrupt("conversation ended") and self._previous is not None:
            await asyncio.wait({self._previous}, timeout=grace_s)
        await self.tasks.cancel_all()

    @property
    def pending(self) -> bool:
        """A turn is running or queued (or a speculation is out): one more is coming, or
        one is being dropped."""
        return (self._spec is not None
                or (self._previous is not None and not self._previous.done()))

    # -- speculation ----------------------------------------------------------------------
    def _turn_running(self) -> bool:
        # An abandoned speculation still finishing its hang-up does not count: the next
        # one is chained behind it and starts once its slot is confirmed idle.
        busy = self.runner.busy and not self.runner.abandoning
        return busy or self._spec is not None

    def _start_early(self, gap: SpeechGap) -> None:
        # One at a time: CTranslate2 runs one transcription at a time anyway, and a second
        # would queue in front of the pause's turn.
        if self._early is not None and self._early.running:
            return
        self._early = EarlyTranscript.start(
            partial(self.runner.recognize, uncancelled=gap.uncancelled), gap.audio,
            gap.end_sample, self.tasks.spawn)
        self._early_cue = self._pitch(gap)
        self.stats.early_asr_started += 1

    def _pitch(self, at: SpeechSoFar) -> asyncio.Future[ProsodyCue]:
        """The pitch of the voice up to ``at``, in a thread (the endpoint's second cue)."""
        return self.tasks.spawn(f"pitch{at.end_sample}", asyncio.to_thread(
            final_cue, at.audio[:at.end_sample - at.start_sample]))

    def _start_speculation(self, pause: SpeechPause) -> None:
        spec = _Speculation(pause, time.monotonic(), _voice_began(pause))
        early = self._early
        if early is not None and early.matches(pause.end_sample):
            # Nothing voiced since the gap: the same words, already being transcribed.
            spec.early, spec.cue = early, self._early_cue
            self.stats.early_asr_used += 1
        self._early = self._early_cue = None
        self._spec = spec
        # Nothing can be heard before its first sentence is synthesized: until then the end
        # (the default, or the policy's once judged) is held, and voice is a resumption.
        self.segmenter.end_after(None, held=True)
        self.stats.started += 1
        spec.task = self._chain(self._speculative_turn(spec), "speculation")

    def _cancel_speculation(self, reason: str) -> None:
        spec = self._spec
        if spec is not None:
            self._drop(spec, reason)
            # Not started yet (queued behind the last turn, which may be a confirmed one
            # that must go on): it finds itself cancelled when its turn comes.
            if spec.turn is not None:
                self.runner.abandon(reason, spec.turn)

    def _drop(self, spec: _Speculation, reason: str) -> None:
        if self._spec is spec:
            self._spec = None
        if spec.cancelled:
            return
        log.info("speculation dropped: %s", reason)
        spec.cancelled = True
        self.stats.cancelled += 1
        self.segmenter.end_after(None)  # back to the default end for the longer utterance

    async def _speculative_turn(self, spec: _Speculation) -> None:
        if spec.cancelled:
            return
        pause = spec.pause
        speech_end = _silence_ms(pause.detected_sample, pause.end_sample)
        # The voice up to the pause: did its pitch fall? Worked out while Whisper runs
        # (since the gap, if there was one), so the endpoint decision at the transcript
        # does not hold up the LLM request.
        if spec.cue is None:
            spec.cue = self._pitch(pause)
        result = await self.runner.run(pause.audio, t0=spec.t0, confirmed=spec.confirmed,
                                       speech_end_ms=round(speech_end, 1), early=spec.early,
                                       rejoined=self._rejoined(spec.began),
                                       uncancelled=pause.uncancelled)
        if self._spec is spec and not spec.ready:
            self.segmenter.release_end()  # it ended with nothing to play: hold nothing
        if result.error is not None and not spec.confirmed.is_set():
            # e.g. "heard no speech" in the words so far: not a turn yet. Let the end of
            # the utterance start an ordinary one.
            self._drop(spec, reason=result.error)
            return
        if result.abandoned or spec.cancelled:
            self.stats.wasted_tokens += _generated_tokens(result)
            if _slot_idle_confirmed(result):
                self.stats.cancelled_idle_confirmed += 1
            return
        endpoint = spec.endpoint_ms if spec.endpoint_ms is not None else speech_end
        self._finished(LiveTurn(result, speech_end, endpoint, speculative=True))

    # -- the words before a cut ------------------------------------------------------------
    def _finished(self, turn: LiveTurn) -> None:
        """A turn is over (not an abandoned speculation): ``CutWords.finished``. Every
        barge-in here is the user's voice but the interrupt when the conversation ends."""
        self.cuts.finished(turn.result, by_voice=not self._closing)
        self.on_turn(turn)

    def _on_event(self, ev: Event) -> None:
        if ev.name == EventName.BARGEIN:
            self.cuts.barged_in(ev.turn)
        if ev.name == EventName.SPECULATION_START and self._confirmed_unstarted is not None:
            note, self._confirmed_unstarted = self._confirmed_unstarted, None
            self.runner.note(EventName.SPECULATION_CONFIRMED, **note)
            return
        spec = self._spec
        if spec is None or spec.confirmed.is_set():
            return
        if ev.name == EventName.SPECULATION_START and spec.turn is None:
            spec.turn = ev.turn
        elif ev.turn != spec.turn:
            return  # the previous turn, still finishing
        elif ev.name == EventName.ASR_END:
            # The speculative transcript decides how long to wait for more speech: decided
            # in a task, after the turn has sent its LLM request.
            self.tasks.spawn(f"endpoint{ev.turn}", self._decide(spec, ev))
        elif ev.name == EventName.LLM_REQUEST:
            spec.requested.set()
        elif ev.name == EventName.TTS_END and not spec.ready:
            spec.ready = True
            self._reply_ready(spec)

    async def _decide(self, spec: _Speculation, ev: Event) -> None:
        assert spec.cue is not None
        cue = await spec.cue
        # The request goes out right after the transcript; the decision never delays it.
        # (Bounded: a turn that fails before its request has its speculation dropped.)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(spec.requested.wait(), _REQUEST_WAIT_S)
        if self._spec is not spec or spec.cancelled or spec.confirmed.is_set():
            return  # the user went on, or the utterance already ended
        decision = judge_endpoint(self.policy, self.runner, ev, cue, self.pauses)
        spec.wait_ms, spec.looks_finished = decision.wait_ms, decision.looks_finished
        # Until the first sentence is synthesized nothing could be heard anyway, so the end
        # is not taken before then: a pause longer than the policy's wait but shorter than
        # the pipeline's time to first audio is still a pause, not a false endpoint.
        self.segmenter.end_after(spec.wait_ms, held=not spec.ready)

    def _reply_ready(self, spec: _Speculation) -> None:
        """The speculative reply's first audio is ready: release the held end, and if its
        silence has already passed, confirm now rather than at the next window."""
        self.segmenter.release_end()
        if spec.wait_ms is None:
            return  # not judged yet: the default end, taken by the segmenter when due
        silence = self.segmenter.silence_ms
        if silence >= spec.wait_ms:
            ended = self.segmenter.end_now()
            self._confirm(spec, silence if ended is None
                          else _silence_ms(ended.detected_sample, ended.end_sample))

    # -- ordinary turns ---------------------------------------------------------------------
    async def _turn(self, utterance: UtteranceEnd, t0: float, endpoint_ms: float,
                    began: float) -> None:
        # t = 0 is when the end was decided; queued behind a finishing turn, that wait is
        # part of this turn's first audio.
        result = await self.runner.run(utterance.audio, t0=t0,
                                       speech_end_ms=round(endpoint_ms, 1),
                                       rejoined=self._rejoined(began),
                                       uncancelled=utterance.uncancelled)
        self._finished(LiveTurn(result, endpoint_ms, endpoint_ms, speculative=False))

    def _chain(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """Run turns one after another: each waits for the previous one to finish (an
        abandoned speculation still confirms its slot idle before the next request)."""
        previous = self._previous

        async def after_previous() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            await coro

        self._count += 1
        task = self.tasks.spawn(f"{name}{self._count}", after_previous())
        self._previous = task
        return task


def _generated_tokens(result: TurnResult) -> int:
    for ev in result.events:
        if ev.name == EventName.LLM_END:
            timings = ev.data.get("timings") or {}
            return int(timings.get("predicted_n") or 0)
    return 0


def _slot_idle_confirmed(result: TurnResult) -> bool:
    if not any(ev.name == EventName.LLM_REQUEST for ev in result.events):
        return True  # dropped before any request: nothing ran on the server
    return any(ev.name == EventName.SLOT_IDLE and ev.data.get("confirmed")
               for ev in result.events)

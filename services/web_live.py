"""Speculative start and the listening endpoint for one browser conversation.

The page cuts its own utterances (services/static/endpointer.js). Hands-free, it also says
when the user pauses (``audio.pause``: 200 ms of silence inside an utterance), when the
silence before it began (``audio.gap``: 100 ms) and when the voice comes back
(``audio.resume``). This is ``pipeline/live.py``'s turn-taking (``talk``) for a page that
sends those cuts instead of a live frame stream:

0. At a gap Whisper and the pitch cue start on the audio so far, in threads
   (``PageGap``, services/web_gap.py, as ``talk`` starts ``EarlyTranscript`` at its
   ``SpeechGap``), where a pause now would speculate and no earlier one still runs. The
   pause that follows takes that transcript when its ``voiced_ms`` is the gap's (nothing
   voiced in between); its turn then waits for it instead of running Whisper
   (``TurnRunner.run(early=...)``, ``asr.start`` with ``early_ms``). Otherwise, or with no
   pause, it is dropped unused.
1. At a pause a turn starts on the audio so far with playback gated
   (``TurnRunner.run(confirmed=...)``): Whisper, the LLM request and the first sentence's
   TTS run, no audio reaches the page. The page is told to ``hold`` its end: nothing could
   be heard before that first sentence is synthesized, so a pause longer than the wait
   but shorter than the pipeline's time to first audio need not be taken for the end.
   ``ready`` releases it at the turn's first ``tts.end`` (or when the turn ends without
   audio), as ``LiveTurnTaker`` releases the segmenter's held end.
2. When its transcript arrives (``asr.end``) the same ``EndpointPolicy`` as ``talk`` judges
   it (text, Whisper's confidence, the pitch before the pause: ``pipeline/prosody.py``),
   records ``speculation.endpoint`` and tells the page how much silence ends this
   utterance (an ``endpoint`` message); the page waits that long instead of its fixed
   700 ms.
3. ``audio.end``: ``speculation.confirmed``, and the turn plays from where it got to. The
   audio after the pause is silence by the page's count (speech did not resume, or the
   page would have said so first), so the turn already holds the whole utterance.
   ``audio.resume`` (or ``audio.cancel``): ``TurnRunner.abandon()``, the verified hang-up
   (stream closed, slot confirmed idle, nothing played or kept in the history); the next
   pause speculates again on the longer audio, queued behind the abandoned turn.

``PageSpeculator`` holds that state for one session; ``BrowserSession`` runs the turns (one
queue, one slot) and asks it what each message means.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.endpoint import EndpointDecision, EndpointPolicy
from pipeline.events import Event, EventName
from pipeline.live import judge_endpoint
from pipeline.pauses import PauseHabit
from pipeline.prosody import ProsodyCue, final_cue
from pipeline.tasks import TaskSet
from services.web_gap import GapStart, PageGap

if TYPE_CHECKING:
    from pipeline.turn import TurnResult, TurnRunner
    from services.ws_sink import Outbox

log = logging.getLogger(__name__)

# A gap's transcription buys the 100 ms between the page's gap and its pause, and when the
# voice comes back it is wasted and CTranslate2 runs the pause's own after it: a stale one
# delays the answer by up to its length. The page's energy VAD cuts 1-6 gaps in a sample
# question (Silero, in talk, about one), so where Whisper takes longer than this the gap
# costs more than it buys (docs/live.md, "The page on the audio"), and none is started.
GAP_ASR_MAX_MS = 400.0


@dataclass
class UtteranceSpeculation:
    """What speculation did over one utterance (``turn.result``'s ``speculation``)."""

    pauses: int = 0  # audio.pause messages
    started: int = 0  # speculative turns started on them
    gaps: int = 0  # audio.gap messages
    early_asr_started: int = 0  # transcriptions started on them (services/web_gap.py)
    early_asr_used: int = 0  # ...that a speculative turn took instead of running Whisper
    early_asr_slow: int = 0  # gaps that started none because Whisper runs slower than
    # GAP_ASR_MAX_MS here
    cancelled: int = 0  # abandoned because speech resumed (or the utterance was dropped)
    state: str | None = None  # how the answering turn came about: confirmed / fresh
    decision: EndpointDecision | None = None  # the last endpoint told to the page
    endpoint_ms: float | None = None  # the page's silence when it ended the utterance

    def to_dict(self) -> dict[str, Any]:
        d = self.decision
        return {"pauses": self.pauses, "started": self.started, "cancelled": self.cancelled,
                "gaps": self.gaps, "early_asr_started": self.early_asr_started,
                "early_asr_used": self.early_asr_used,
                "early_asr_slow": self.early_asr_slow, "state": self.state,
                "wait_ms": d.wait_ms if d else None,
                "reason": str(d.reason) if d else None, "learned": bool(d and d.learned),
                "endpoint_ms": self.endpoint_ms}


@dataclass
class Speculation:
    """One speculative turn, started at pause number ``pause`` of an utterance."""

    utterance: UtteranceSpeculation
    input_id: str | None
    pause: int  # the page's number for this pause within the utterance
    silence_ms: float  # the page's silence at the pause: last voiced frame -> t0
    t0: float
    confirmed: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: bool = False
    running: bool = False  # between TurnRunner.run's start and return
    finished: bool = False  # its turn ended (whatever way)
    held: bool = False  # the page was told to hold its end and not yet that it is ready
    turn: int | None = None  # its turn number, from speculation.start
    cue: asyncio.Future[ProsodyCue] | None = None  # the pitch at the pause, in a thread
    gap: PageGap | None = None  # Whisper on these words, started at the gap before it
    looks_finished: bool = False  # the endpoint judged its words a whole sentence

    @property
    def live(self) -> bool:
        """Still able to become the answer: neither dropped nor ended."""
        return not self.cancelled and not self.finished


class PageSpeculator:
    def __init__(self, runner: TurnRunner, outbox: Outbox, *, enabled: bool = True,
                 early_asr: bool = True, policy: EndpointPolicy | None = None,
                 pauses: PauseHabit | None = None) -> None:
        self.runner, self.outbox = runner, outbox
        self.enabled = enabled
        self.early_asr = early_asr  # False: gaps are counted, Whisper waits for the pause
        self.policy = policy or EndpointPolicy()
        self.pauses = pauses  # this user's pauses after finished-looking words (pauses.py)
        self.current: Speculation | None = None  # of the open utterance
        self.running: Speculation | None = None  # whose turn TurnRunner runs now
        self.gap: PageGap | None = None  # started in the open utterance's current silence
        self.last_gap: PageGap | None = None  # the last one started (one runs at a time)
        self.tasks = TaskSet("page-speculation")

    # -- the page's messages ----------------------------------------------------------------
    def may_speculate(self, free: bool) -> bool:
        """Would a pause now start a speculation? ``free``: no other turn runs or waits (an
        abandoned one finishing its hang-up does not count)."""
        return self.enabled and free and (self.current is None or not self.current.live)

    def gap_in(self, utterance: UtteranceSpeculation, voiced_ms: float, silence_ms: float,
               decode: Callable[[], np.ndarray], free: bool) -> bool:
        """A gap in the open utterance (``decode``: its audio so far, blocking): True if
        Whisper starts on it, when a pause now would speculate and no other early
        transcription still runs (CTranslate2 would queue it in front of the pause's turn)."""
        utterance.gaps += 1
        self.gap = None  # an older one is about fewer words
        last = self.last_gap
        if not (self.early_asr and self.may_speculate(free)) or (last is not None
                                                                  and last.running):
            return False
        slow = self.runner.asr_clock.last_ms
        if slow is not None and slow > GAP_ASR_MAX_MS:
            utterance.early_asr_slow += 1
            return False
        self.gap = self.last_gap = PageGap.start(utterance, voiced_ms, silence_ms, decode,
                                                 self.runner.recognize, self.tasks.spawn)
        utterance.early_asr_started += 1
        return True

    def pause(self, utterance: UtteranceSpeculation, input_id: str | None, pause: int,
              silence_ms: float, free: bool,
              voiced_ms: float | None = None) -> Speculation | None:
        """A pause in the open utterance: the speculation to run, or None. It takes the
        transcript started at the gap before it if ``voiced_ms`` says nothing was voiced
        since (else that one is dropped)."""
        utterance.pauses += 1
        gap, self.gap = self.gap, None
        if not self.may_speculate(free):
            return None
        spec = Speculation(utterance, input_id, pause, silence_ms, time.monotonic())
        if gap is not None and gap.matches(utterance, voiced_ms):
            spec.gap = gap
            utterance.early_asr_used += 1
        self.current = spec
        utterance.started += 1
        return spec

    def resume(self, reason: str, silence_ms: float | None = None) -> None:
        """The voice came back after ``silence_ms`` (or the utterance was dropped): abandon
        the speculation."""
        self.gap = None
        spec, self.current = self.current, None
        if spec is None or not spec.live:
            return
        if self.pauses is not None and spec.looks_finished and silence_ms is not None:
            self.pauses.went_on(silence_ms)  # a near miss: finished-looking, not done
        log.info("speculation dropped: %s", reason)
        spec.cancelled = True
        spec.utterance.cancelled += 1
        if spec.running:  # not started yet: run_turn finds it cancelled and skips it
            # Its own turn only, as LiveTurnTaker does (the page runs one turn at a time,
            # so the running one is this one; the number keeps that true if it changes).
            self.runner.abandon(reason, spec.turn)

    def end(self, endpoint_ms: float) -> bool:
        """The page ended the utterance: True if its speculation is confirmed (no new
        turn); False when there is none to confirm (a fresh turn on the whole audio)."""
        if self.pauses is not None:
            self.pauses.utterance_ended()
        spec, self.current = self.current, None
        if spec is None or not spec.live:
            return False
        spec.utterance.state = "confirmed"
        spec.utterance.endpoint_ms = endpoint_ms
        spec.confirmed.set()
        if spec.running:
            self._note_confirmed(spec)  # else at its speculation.start
        return True

    def unconfirmed(self) -> bool:
        """A speculative turn runs whose audio the page must not get yet."""
        spec = self.running
        return spec is not None and not spec.confirmed.is_set()

    # -- the turn ---------------------------------------------------------------------------
    async def early(self, spec: Speculation) -> GapStart | None:
        """The transcription its gap started, if it has one (waited for only as long as
        the gap's audio takes to decode)."""
        return await spec.gap.started() if spec.gap is not None else None

    def started(self, spec: Speculation, audio: np.ndarray,
                early: GapStart | None = None) -> bool:
        """Its turn is about to run on ``audio`` (Whisper and the pitch already running
        since the gap with ``early``): False if it was dropped meanwhile."""
        if spec.cancelled:
            return False
        spec.running = True
        self.running = spec
        spec.cue = (early.cue if early is not None
                    else asyncio.ensure_future(asyncio.to_thread(final_cue, audio)))
        if not spec.confirmed.is_set():  # the page has not ended the utterance yet
            spec.held = True
            self.outbox.json({"type": "hold", "input_id": spec.input_id, "pause": spec.pause})
        return True

    def finished(self, spec: Speculation, result: TurnResult | None) -> str | None:
        """Its turn ended (``result`` None: it never ran): None if it is the answer, else
        why not (``cancelled``: speech resumed; ``dropped``: it failed, was interrupted or
        could not run before the endpoint). The end of the utterance then starts a turn.
        A page still holding its end for it is released."""
        spec.running, spec.finished = False, True
        if self.running is spec:
            self.running = None
        if spec.confirmed.is_set() and result is not None:
            outcome = None
        elif spec.cancelled or (result and result.abandoned):
            outcome = "cancelled"
        else:
            outcome = "dropped"
        if spec.held:  # it ended with nothing to play: hold nothing
            self._ready(spec, outcome or "ended")
        return outcome

    def on_event(self, ev: Event) -> None:
        """Listener: the speculative transcript decides the endpoint; its first synthesized
        sentence releases the page's held end."""
        spec = self.running
        if spec is None:
            return
        if ev.name == EventName.SPECULATION_START:
            spec.turn = ev.turn
            if spec.confirmed.is_set():
                self._note_confirmed(spec)  # the page ended the utterance before it started
        elif ev.name == EventName.ASR_END and not spec.confirmed.is_set():
            self.tasks.spawn(f"endpoint{ev.turn}", self._decide(spec, ev))
        elif ev.name == EventName.TTS_END and spec.held and ev.turn == spec.turn:
            self._ready(spec, "audio")

    def _ready(self, spec: Speculation, reason: str) -> None:
        """Release the page's held end: ``audio`` (the first sentence is synthesized) or
        why the speculation ended without it."""
        spec.held = False
        self.outbox.json({"type": "ready", "input_id": spec.input_id, "pause": spec.pause,
                          "reason": reason})

    async def _decide(self, spec: Speculation, asr_end: Event) -> None:
        assert spec.cue is not None
        cue = await spec.cue
        if self.running is not spec or spec.cancelled or spec.confirmed.is_set():
            return  # the page already ended or resumed: nothing left to tell it
        decision = judge_endpoint(self.policy, self.runner, asr_end, cue, self.pauses)
        spec.utterance.decision, spec.looks_finished = decision, decision.looks_finished
        self.outbox.json({"type": "endpoint", "input_id": spec.input_id, "pause": spec.pause,
                          "turn": asr_end.turn, "wait_ms": decision.wait_ms,
                          "reason": str(decision.reason), "learned": decision.learned,
                          "pitch_fall_st": round(cue.fall_st, 1)})

    def _note_confirmed(self, spec: Speculation) -> None:
        self.runner.note(EventName.SPECULATION_CONFIRMED,
                         endpoint_ms=round(spec.utterance.endpoint_ms or 0.0),
                         ahead_ms=round((time.monotonic() - spec.t0) * 1000))

    async def close(self) -> None:
        self.resume("conversation ended")
        self.last_gap = None
        await self.tasks.cancel_all()

"""One conversational turn: ASR -> LLM -> splitter -> TTS -> playback.

The stages run as tasks of one ``TaskSet`` connected by queues; every moment is recorded
through the turn's ``EventRecorder`` and the metrics come from that log afterwards.

Two modes share the same stages and the same prompt:
- ``streamed``: a sentence goes to TTS the moment the splitter releases it, and playback
  starts with the first sentence while the model is still writing the rest;
- ``serial``: the lab's starting point - the whole reply, then all of its speech, then play.

``TurnRunner.interrupt()`` is how barge-in stops a turn: the sink goes silent within one
block, queued and running TTS is dropped, the LLM connection is *closed* (an unread open
connection keeps llama-server generating on the CPU the next turn needs), and /slots is
polled until the server's slot is idle. The history then keeps only what was heard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipeline.audio_in import SAMPLE_RATE
from pipeline.audio_out import AudioSink
from pipeline.conversation import Conversation, Message
from pipeline.early_asr import AsrResult, EarlyTranscript
from pipeline.events import Event, EventName, EventRecorder, Listener
from pipeline.heard import HeardText, worth_keeping
from pipeline.llm_caps import NOT_VERIFIABLE
from pipeline.llm_client import (
    ChatOptions,
    ChatStream,
    Finished,
    LlmClient,
    LlmError,
    LlmHttpError,
    ResponseStarted,
    RoleChunk,
    StreamEvent,
    TokenDelta,
)
from pipeline.metrics import TurnMetrics, turn_metrics
from pipeline.mic_tape import recognize_over_reply
from pipeline.outlet import Outlet
from pipeline.rejoin import Rejoined, join_transcripts
from pipeline.splitter import PHRASE_STARTS, SentenceSplitter, SpeechChunker
from pipeline.stages import ConfidentTranscriber, Synthesizer, Transcriber, engine_of
from pipeline.tasks import TaskSet
from pipeline.tts import speakable, trim_leading_silence

log = logging.getLogger(__name__)

FRESH_TEMPERATURE = 0.8  # the retry of a reply that said nothing aloud
MODES = ("streamed", "serial")
# How long a turn waits for the previous turn's background prime before its own request
# (the prefill of a few dozen tokens takes ~50-200 ms here; longer means a stalled server,
# which the turn's own request will report).
PRIME_WAIT_S = 1.0


class TurnError(Exception):
    """A stage failed in a way the user can understand (message is one line)."""


class _Abandoned(Exception):
    """A speculative turn was dropped before its LLM request: the turn ends quietly."""


@dataclass
class TurnConfig:
    mode: str = "streamed"
    max_tokens: int = 160
    max_sentences: int | None = 4  # then the stream is closed: the server stops generating
    # Soft cut: a first sentence past N chars is released at its latest clause mark, so
    # Piper starts on "To make a good cup of tea," (measured: first audio p50 1048 -> 910 ms).
    first_max_chars: int | None = 20
    # Word-boundary cut when the first sentence has no clause mark: released before the first
    # phrase-starting word ("and/to/is/in/by...", ``first_phrase_words``) at or past N chars
    # (None: off). Measured with scripts/bench_first_cut.py (docs/live.md).
    first_phrase_chars: int | None = 15
    first_phrase_words: frozenset[str] = PHRASE_STARTS
    # A first sentence that reaches N chars with neither is cut at a word boundary anyway
    # ("The history of bicycles | dates back ..."): Piper's time grows with the head.
    # Measured with scripts/bench_first_cut.py (docs/live.md): first audio -76 ms p50
    # paired, against the cut at a phrase start only. None: off.
    first_word_chars: int | None = 36
    temperature: float = 0.3
    seed: int | None = 1234
    # Without a repetition penalty SmolLM2-135M settles, within ~15 turns of one
    # conversation, into one template for every answer ("The way to explain it is to think
    # of ... You can think of ..."): 24 of the 24 later replies looped and copied another
    # answer, against 0 and 0 with 1.15 over the last 512 tokens (scripts/bench_history_cut.py,
    # docs/results.md). None: the server's default (1.0, off).
    repeat_penalty: float | None = 1.15
    repeat_last_n: int = 512
    # How long a hang-up's slot may take to show idle before it is reported unconfirmed.
    # Alone it takes 4-42 ms; with three conversations or a soak on the 2 cores a hung-up
    # slot was seen busy up to 1.2 s (docs/results.md), so 1 s called slow stops failures.
    slot_idle_timeout: float = 3.0
    # The server slot this conversation owns (serve: one per session, so its KV prefix
    # stays cached); None lets llama-server choose. Barge-in then waits on this slot only.
    id_slot: int | None = None
    volatile: Callable[[], str | None] | None = None  # per-turn text, placed last
    # The reply's language for the splitter's abbreviation and ordinal rules (the ASR
    # language); None uses every language's tables (docs/splitter.md).
    language: str | None = None
    # After each turn that went into the history, prefill the next prompt's start (the
    # history, the reply as kept, the user's header) before the user's next words, so
    # the next question pays only for its own words (``TurnRunner.prime_next``). Live paths
    # (talk, replay --live, serve) turn it on; whole-file replay keeps the old timing.
    prime_next: bool = False


@dataclass
class TurnResult:
    turn: int
    mode: str
    transcript: str = ""  # the user message sent: Whisper's words, after any rejoined ones
    reply: str = ""  # raw generated text as kept in the history
    heard: str = ""  # what the user actually heard
    interrupted: bool = False
    abandoned: bool = False  # a speculative turn the user talked on through: never heard
    error: str | None = None
    events: list[Event] = field(default_factory=list)
    metrics: TurnMetrics = field(init=False)
    # The reply sentence by sentence with its audio, and whether it went into the history:
    # a client that plays the audio itself can still cut the history at what it played.
    spoken: HeardText | None = field(default=None, repr=False, compare=False)
    committed: bool = False

    def __post_init__(self) -> None:
        self.metrics = TurnMetrics(self.mode)

    def record(self, file: str, run: int = 1) -> dict[str, Any]:
        """The per-turn record of ``replay --json`` and ``compare.json`` (docs/contracts.md)."""
        return {**self.metrics.to_dict(), "file": file, "run": run,
                "transcript": self.transcript, "reply": self.reply, "heard": self.heard,
                "error": self.error}


@dataclass
class AsrClock:
    """How long the ASR engine's last recognition took, in ms (None before the first):
    whether a transcription that may be wasted is worth starting (services/web_live.py).
    One per engine, shared by the runners of its conversations (``Assistant.runner``)."""

    last_ms: float | None = None


class TurnRunner:
    """Runs turns of one conversation against one LLM client, TTS and sink."""

    def __init__(self, asr: Transcriber | None, llm: LlmClient, tts: Synthesizer,
                 sink: AudioSink,
                 conversation: Conversation | None = None, config: TurnConfig | None = None,
                 listeners: list[Listener] | None = None,
                 asr_clock: AsrClock | None = None) -> None:
        self.asr, self.llm, self.tts, self.sink = asr, llm, tts, sink
        self.conversation = conversation or Conversation()
        self.config = config or TurnConfig()
        self.listeners = list(listeners or [])
        self.asr_clock = asr_clock or AsrClock()
        self.turns = 0
        self._current: _Turn | None = None
        self._priming: asyncio.Task[dict[str, Any] | None] | None = None
        # The last background prime's server timings (and how long a turn waited for it),
        # reported once by the next turn's llm.request as ``primed``.
        self.last_prime: dict[str, Any] | None = None

    async def run(self, audio: np.ndarray | None = None, *, text: str | None = None,
                  t0: float | None = None, mode: str | None = None,
                  confirmed: asyncio.Event | None = None,
                  speech_end_ms: float | None = None,
                  early: EarlyTranscript | None = None,
                  rejoined: Rejoined | None = None,
                  uncancelled: np.ndarray | None = None) -> TurnResult:
        """One turn from the user's audio (or text, skipping ASR). ``t0`` is the monotonic
        time the turn starts (default: now).

        ``confirmed``: a speculative turn. Everything runs, but nothing is played until the
        event is set (the endpoint is confirmed); ``abandon()`` drops it unheard.
        ``speech_end_ms``: how long before t0 the user's last voiced sample was (live
        turns), recorded in turn.start so the endpoint wait shows before t = 0.
        ``early``: a transcription of this utterance already running (started at a gap,
        ``pipeline.early_asr``); the turn waits for it instead of running ASR on ``audio``.
        ``rejoined``: an earlier turn's user words, cut off with its reply: this turn's user
        message is that text joined with the new transcript (``join_transcripts``), and
        ``asr.end`` records it (``rejoined: {text, turn}``).
        ``uncancelled``: ``audio`` as the microphone heard it, when the echo canceller
        changed it while the reply played (``pipeline.mic_tape``): transcribed too when
        Whisper was unsure of ``audio`` (``recognize``)."""
        mode = mode or self.config.mode
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
        self.turns += 1
        rec = EventRecorder(self.turns, t0, self.listeners)
        turn = _Turn(self, rec, mode, confirmed, speech_end_ms, early, rejoined, uncancelled)
        self._current = turn
        try:
            result = await turn.run(audio, text)
        finally:
            self._current = None
            self.sink.resume()
        if result.committed and self.config.prime_next:
            self.prime_next()
        return result

    def recognize(self, audio: np.ndarray,
                  uncancelled: np.ndarray | None = None) -> AsrResult:
        """The ASR engine on one utterance, blocking (run it in a thread). Its time goes
        into ``asr_clock``.

        With ``uncancelled`` (the same span before the echo canceller, which bent the
        user's words where they overlapped the reply) a confident transcriber unsure of the
        cancelled audio decodes the microphone's own too and keeps the transcript it was
        surer of: a second decode for half the turns that spoke over the reply, for a
        third to two thirds of their word errors (``pipeline.mic_tape``)."""
        asr = self.asr
        if asr is None:
            raise TurnError("no speech recognizer for this audio")
        started = time.perf_counter()
        if isinstance(asr, ConfidentTranscriber):
            heard, kept = recognize_over_reply(asr.recognize, audio, uncancelled)
            result = AsrResult(heard.text, heard.avg_logprob, heard.last_word_prob,
                               heard.redone, kept)
        else:
            result = AsrResult(asr.transcribe(audio))
        self.asr_clock.last_ms = (time.perf_counter() - started) * 1000
        return result

    async def prime(self) -> bool:
        """Prefill what the next prompt starts with (the system prompt and any loaded
        history) into the slot's KV cache before the user speaks, so the first question
        pays only for its own tokens: in talk's first turn 44 of 50 prompt tokens were
        prefilled while the user waited (~110 ms). One token is generated and dropped.
        False when the server could not do it; the first turn then pays, as before."""
        return await self._prefill(*self._prime_request()) is not None

    def _prime_request(self) -> tuple[list[Message], ChatOptions]:
        """The prime's prompt and options, taken now: a caller may change ``config``
        (serve sets the turn's ``id_slot`` only while it runs) before the request goes."""
        opts = ChatOptions(max_tokens=1, cache_prompt=True, temperature=self.config.temperature,
                           seed=self.config.seed, id_slot=self.config.id_slot)
        return self.conversation.messages_for(""), opts

    async def _prefill(self, messages: list[Message],
                       opts: ChatOptions) -> dict[str, Any] | None:
        """The prime's request: the server's timings, or None when it failed."""
        try:
            async with self.llm.stream_chat(messages, opts) as stream:
                async for _ in stream:
                    pass
                return stream.last_timings
        except LlmError as e:
            log.info("priming the slot failed: %s", e)
            return None

    def prime_next(self) -> None:
        """``prime()`` in the background, after a turn went into the history. The prompt
        of the next turn starts with exactly what was committed, and the slot held the
        prompt and reply as generated: the reply as kept (cut at a barge-in or at
        ``max_sentences``, its text tokenized afresh), its end and the next user header
        are new to the cache. Prefilled now (the reply has played, or been cut),
        they leave the next question only its own words; once in a while the kept
        reply's tokens differ from the generated ones early and that is hundreds of
        milliseconds (docs/live.md, "The next prompt prefilled"). The next turn waits for
        it (``primed``) so its request never queues behind it unseen."""
        if self._priming is not None and not self._priming.done():
            self._priming.cancel()
        self._priming = asyncio.get_running_loop().create_task(
            self._prefill(*self._prime_request()), name="prime")

    async def drop_prime(self) -> None:
        """The conversation ends: a background prime still running is hung up on (its
        slot may go to another conversation next)."""
        task, self._priming = self._priming, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def primed(self) -> None:
        """Before a turn's request: let a background prime finish (at most
        ``PRIME_WAIT_S``; a stalled server is the turn's to report) and note what it
        did for the request's event."""
        task, self._priming = self._priming, None
        if task is None:
            return
        started = time.perf_counter()
        try:
            timings = await asyncio.wait_for(task, PRIME_WAIT_S)
        except TimeoutError:
            timings = None
            log.info("the next prompt's prefill took over %.1f s; dropped", PRIME_WAIT_S)
        except Exception:  # a prime never fails a turn: the request prefills what it must
            timings = None
            log.exception("the next prompt's prefill failed")
        waited = (time.perf_counter() - started) * 1000
        self.last_prime = {"prompt_n": (timings or {}).get("prompt_n"),
                           "prompt_ms": (timings or {}).get("prompt_ms"),
                           "ok": timings is not None, "wait_ms": round(waited, 1)}

    @property
    def speaking(self) -> bool:
        return self._current is not None and self._current.playing

    @property
    def busy(self) -> bool:
        return self._current is not None

    @property
    def abandoning(self) -> bool:
        """The running turn is an abandoned speculation, only finishing its hang-up."""
        return self._current is not None and self._current.abandoned

    def interrupt(self, source: str = "user") -> bool:
        """Barge-in: stop the current turn. Returns False when no turn is running."""
        if self._current is None:
            return False
        self._current.interrupt(source)
        return True

    def note(self, name: EventName, **data: Any) -> None:
        """Record an event of the running turn from outside it (live turn-taking)."""
        if self._current is not None:
            self._current.rec.emit(name, **data)

    def abandon(self, reason: str = "speech resumed", turn_number: int | None = None) -> bool:
        """Drop a speculative turn: the same verified hang-up as barge-in, nothing played,
        nothing kept in the history. False when no turn runs or it is already playing.
        ``turn_number``: only if the running turn is that one (the speculation being
        dropped may still be queued behind a confirmed turn, which must go on)."""
        turn = self._current
        if turn is None or turn.started_playing:
            return False
        if turn_number is not None and turn.rec.turn != turn_number:
            return False
        turn.abandon(reason)
        return True


class _Turn:
    def __init__(self, runner: TurnRunner, rec: EventRecorder, mode: str,
                 confirmed: asyncio.Event | None = None,
                 speech_end_ms: float | None = None,
                 early: EarlyTranscript | None = None,
                 rejoined: Rejoined | None = None,
                 uncancelled: np.ndarray | None = None) -> None:
        self.runner, self.rec, self.mode = runner, rec, mode
        self.cfg = runner.config
        self.tasks = TaskSet(f"turn{rec.turn}")
        self.sentences: Outlet[tuple[int, str]] = Outlet(hold=mode == "serial")
        self.audio: Outlet[tuple[int, np.ndarray]] = Outlet(hold=mode == "serial")
        self.heard = HeardText()
        self.stream: ChatStream | None = None  # set once, before the stages start
        self.finished: Finished | None = None  # the server finished the reply
        self.llm_ended = False  # llm.end is recorded
        self.cut: LlmError | None = None  # the stream broke after sentences were released
        self.playing = False
        self.started_playing = False
        self.confirmed = confirmed
        self.speech_end_ms = speech_end_ms
        self.dropped = asyncio.Event()  # abandon(): a speculation the user talked on through
        self.interrupted: asyncio.Event = asyncio.Event()
        self.unanswered = ""  # the words of a turn stopped before its request
        self.hangup: asyncio.Task[None] | None = None
        self.tts_thread: int | None = None
        self.early = early  # a transcription started before t = 0 (pipeline/early_asr.py)
        self.uncancelled = uncancelled  # the audio before the echo canceller, if it changed
        self.rejoined = rejoined  # the user's words of a cut turn, before the new ones

    @property
    def abandoned(self) -> bool:
        return self.dropped.is_set()

    # -- the turn ---------------------------------------------------------------------
    async def run(self, audio: np.ndarray | None, text: str | None) -> TurnResult:
        result = TurnResult(self.rec.turn, self.mode)
        live = {} if self.speech_end_ms is None else {"speech_end_ms": self.speech_end_ms}
        self.rec.emit(EventName.TURN_START, mode=self.mode, **live)
        if self.confirmed is not None:
            self.rec.emit(EventName.SPECULATION_START)
        self.runner.llm.prefetch_capabilities()  # once per client, while ASR runs
        sent: list[Message] | None = None
        try:
            result.transcript = await self.transcribe(audio, text)
            sent = self.runner.conversation.messages_for(result.transcript, self.volatile())
            try:
                await self.run_stages(sent)
            except LlmHttpError as e:
                if not self.trim_for_overflow(e):
                    raise
                await self.tasks.cancel_all()
                await self.stream_closed()
                self.reset_stages()
                sent = self.runner.conversation.messages_for(result.transcript,
                                                             self.volatile())
                await self.run_stages(sent)  # the one retry
            if self.finished is not None and not self.interrupted.is_set() \
                    and not self.abandoned and self.nothing_aloud():
                # "..." and nothing else: deterministic sampling would give the same again
                # on the same history, turn after turn. Once more, with fresh sampling; the
                # user has heard nothing yet.
                self.rec.emit(EventName.SILENT_RETRY, reply=self.heard.raw)
                self.reset_stages()
                await self.run_stages(sent, fresh_sampling=True)
            result.reply = self.heard.reply(complete=self.finished is not None)
            result.abandoned = self.abandoned
            result.interrupted = self.interrupted.is_set() and not self.abandoned
            result.heard = self.heard.heard_text() if result.interrupted else result.reply
            kept = self.heard.heard_raw() if result.interrupted else result.reply
            # Not kept: an abandoned speculation (the user was not done talking), a reply
            # cut before MIN_KEPT_WORDS of it were heard, and one with nothing to say
            # aloud ("..."). SmolLM2 copies what it sees: a lone "…" in the history made it
            # answer "…" to the next questions (a serve soak: 7 of 8 turns), kept "The…"
            # cuts came back glued to later replies ("Thehistory of…"); a kept "..." would
            # invite the same.
            if not self.abandoned and not (result.interrupted
                                           and not worth_keeping(result.heard)) \
                    and not self.nothing_aloud():
                self.runner.conversation.commit(sent, kept)
                result.committed = True
        except _Abandoned:
            result.abandoned = self.abandoned
            # Cut before its request (the user went on talking while Whisper ran): nothing
            # was said or kept, but the words it heard are the cut turn's (rejoin.py).
            result.interrupted = not self.abandoned
            result.transcript = self.unanswered
        except (TurnError, LlmError) as e:
            result.error = str(e)
            self.rec.emit(EventName.TURN_ERROR, message=result.error)
            if self.cut is not None and sent is not None \
                    and worth_keeping(self.heard.heard_text()):
                # The stream was cut mid-reply (server died): the history keeps what
                # the user heard, marked as cut, like a barge-in.
                result.reply = self.heard.reply(complete=False)
                result.heard = self.heard.heard_text()
                self.runner.conversation.commit(sent, self.heard.heard_raw())
                result.committed = True
        finally:
            result.spoken = self.heard  # the last attempt's: a retry has its own
            await self.tasks.cancel_all()
            if self.stream is not None:
                await self.stream.aclose()
        caps = self.runner.llm.caps
        if caps is not None and self.rec.first(EventName.LLM_REQUEST) is not None:
            # What the server offers, as known now: every turn's log says which of its
            # figures cannot be known (docs/llm-servers.md).
            self.rec.emit(EventName.LLM_CAPABILITIES, **caps.to_dict())
        result.metrics = turn_metrics(self.rec.events, self.mode)
        self.rec.emit(EventName.TURN_END, metrics=result.metrics.to_dict())
        result.events = list(self.rec.events)
        return result

    def trim_for_overflow(self, e: LlmHttpError) -> bool:
        """The prompt did not fit the slot's context: drop the oldest turns so it does,
        with room for the reply. True when there was something to drop (retry once)."""
        info = _overflow(e)
        if info is None or self.heard.raw or self.rec.first(EventName.CONTEXT_TRIMMED):
            return False
        n_prompt, n_ctx = info
        # Keep the share of the history that fits beside the reply, with a margin: the
        # character count only approximates tokens.
        budget = (n_ctx - self.cfg.max_tokens - 32) / n_prompt if n_prompt and n_ctx else 0.5
        dropped = self.runner.conversation.trim_oldest(0.85 * budget)
        if not dropped:
            return False
        log.warning("context overflow (%s of %s tokens): dropped the %d oldest messages",
                    n_prompt, n_ctx, dropped)
        self.rec.emit(EventName.CONTEXT_TRIMMED, dropped_messages=dropped,
                      prompt_tokens=n_prompt, n_ctx=n_ctx)
        return True

    async def stream_closed(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()

    def reset_stages(self) -> None:
        """Fresh queues for a retried request (the failed attempt closed them)."""
        self.sentences = Outlet(hold=self.mode == "serial")
        self.audio = Outlet(hold=self.mode == "serial")
        self.heard = HeardText()
        self.finished = None
        self.llm_ended = False

    def volatile(self) -> str | None:
        return self.cfg.volatile() if self.cfg.volatile else None

    async def transcribe(self, audio: np.ndarray | None, text: str | None) -> str:
        transcript = await self._transcribe(audio, text)
        if self.rejoined is not None:
            # The transcripts are joined, not the audio transcribed again: Whisper already
            # heard the earlier words (the LLM was sent exactly that text), a second pass
            # over both would cost this turn the earlier audio's ASR time again, and the
            # audio between them holds the cut reply (its echo, with open speakers).
            transcript = join_transcripts(self.rejoined.text, transcript)
        await self.runner.primed()  # the last turn's prefill, before this turn's request
        # Speech resumed while Whisper ran (or the turn was cut, or a stop signal closed
        # it): no LLM request for a reply nobody will hear.
        if self.abandoned or self.interrupted.is_set():
            self.unanswered = transcript
            raise _Abandoned
        return transcript

    async def _transcribe(self, audio: np.ndarray | None, text: str | None) -> str:
        if text is not None:
            return text
        asr = self.runner.asr
        early = self.early
        if early is not None:
            audio = early.audio
        if audio is None or asr is None:
            raise TurnError("no audio and no text for this turn")
        # An early transcription (started at a gap before t = 0) is waited for, not redone:
        # asr.start is when the turn begins waiting, so asr_ms is what it cost this turn.
        started = {} if early is None else {
            "early_ms": round((self.rec.t0 - early.started) * 1000, 1)}
        self.rec.emit(EventName.ASR_START, audio_s=round(len(audio) / SAMPLE_RATE, 3),
                      engine=engine_of(asr), **started)
        try:
            heard = await self.unless_stopped(
                early.result() if early is not None
                else asyncio.to_thread(self.runner.recognize, audio, self.uncancelled))
        except _Abandoned:
            raise
        except Exception as e:  # a model failure ends this turn, not the conversation
            log.exception("ASR failed")
            raise TurnError(f"speech recognition failed: {e}") from e
        transcript = heard.text.strip()
        confidence = ({} if heard.avg_logprob is None
                      else {"avg_logprob": round(heard.avg_logprob, 3)})
        if heard.last_word_prob is not None:
            confidence["last_word_prob"] = round(heard.last_word_prob, 3)
        # Whisper looped: part of asr_ms is the decode done again.
        redone: dict[str, Any] = {"redone": heard.redone} if heard.redone else {}
        # The canceller changed this audio: one decode ("sure") or two, and the one kept.
        double_talk: dict[str, Any] = ({"double_talk": heard.double_talk}
                                       if heard.double_talk else {})
        # ``text`` stays the new words alone (the live endpoint policy judges them, with the
        # confidence and pitch of this audio); ``rejoined`` says what goes before them.
        rejoined: dict[str, Any] = ({} if self.rejoined is None
                                    else {"rejoined": self.rejoined.to_dict()})
        self.rec.emit(EventName.ASR_END, text=transcript, **confidence, **redone,
                      **double_talk, **rejoined)
        if not transcript and self.rejoined is None:
            raise TurnError("heard no speech in this turn (silence or noise only)")
        # With words of a cut turn and none new, the voice that cut it was no words (a
        # cough, a noise): the cut request is answered after all.
        return transcript

    async def unless_stopped(self, work: Coroutine[Any, Any, AsrResult]) -> AsrResult:
        """``work``, unless the turn is abandoned first: then _Abandoned at once. Whisper's
        thread cannot be stopped; its result is dropped, and the next turn (queued behind
        this one) does not wait for it. An interrupted turn (barge-in before the reply was
        played) waits for the words: they go on with the next utterance (rejoin.py)."""
        asr = self.tasks.spawn("asr", work)
        stopped = self.tasks.spawn("asr-stopped", self.dropped.wait())
        try:
            await asyncio.wait({asr, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not asr.done():
            asr.cancel()
            raise _Abandoned
        return asr.result()

    def nothing_aloud(self) -> bool:
        """The reply has text but not a sample of audio ("...")."""
        return bool(self.heard.raw.strip()) and self.heard.audio_samples() == 0

    async def run_stages(self, sent: list[Message], *, fresh_sampling: bool = False) -> None:
        temperature, seed = ((max(self.cfg.temperature or 0.0, FRESH_TEMPERATURE), None)
                             if fresh_sampling else (self.cfg.temperature, self.cfg.seed))
        opts = ChatOptions(max_tokens=self.cfg.max_tokens, cache_prompt=True,
                           temperature=temperature, seed=seed,
                           id_slot=self.cfg.id_slot, include_usage=True,
                           repeat_penalty=self.cfg.repeat_penalty,
                           repeat_last_n=self.cfg.repeat_last_n,
                           extra={"timings_per_token": True})
        # Created here, before any stage runs, so the llm stage and the hang-up share one
        # stream that no task has to hand to the other.
        self.stream = stream = self.runner.llm.stream_chat(sent, opts)
        stages = [self.tasks.spawn("llm", self.llm_stage(stream)),
                  self.tasks.spawn("tts", self.tts_stage()),
                  self.tasks.spawn("playback", self.playback_stage())]
        # The first stage to fail ends the turn; the others are cancelled by run().
        for fut in asyncio.as_completed(stages):
            try:
                await fut
            except asyncio.CancelledError:
                if not self.interrupted.is_set():
                    raise
            except LlmError:
                if not self.interrupted.is_set():  # a hang-up may surface as a read error
                    raise
            except TurnError:
                raise
            except Exception as e:
                log.exception("stage failed")
                raise TurnError(f"pipeline stage failed: {type(e).__name__}: {e}") from e
        if self.hangup is not None:
            await self.hangup
            await self.confirm_slot_idle()
        if self.cut is not None:
            raise self.cut

    # -- stages ---------------------------------------------------------------------
    async def llm_stage(self, stream: ChatStream) -> None:
        chunker = SpeechChunker(SentenceSplitter(language=self.cfg.language),
                                max_sentences=self.cfg.max_sentences,
                                first_max_chars=self.cfg.first_max_chars,
                                first_phrase_chars=self.cfg.first_phrase_chars,
                                phrase_starts=self.cfg.first_phrase_words,
                                first_word_chars=self.cfg.first_word_chars)
        try:
            async with stream:
                async for ev in stream:
                    self.on_stream_event(ev, stream, chunker)
                    if chunker.done:  # enough sentences: hang up so the server stops
                        break
                for sentence in chunker.flush():
                    self.release(sentence)
            if self.finished is None:
                self.record_llm_end(stream, hung_up="max_sentences")
        except LlmError as e:
            if self.interrupted.is_set() or not self.heard.sentences:
                raise
            # The rule for a reply cut mid-stream (the server died or the connection
            # broke): sentences already released are complete, so they are synthesized
            # and played to the end; the unfinished fragment after them is dropped. The
            # turn then reports the error (run_stages re-raises it).
            self.cut = e
            self.rec.emit(EventName.LLM_END, finish_reason="error",
                          timings=stream.last_timings)
            self.llm_ended = True
        finally:
            self.sentences.close()

    def on_stream_event(self, ev: StreamEvent, stream: ChatStream,
                        chunker: SpeechChunker) -> None:
        if isinstance(ev, ResponseStarted):  # request_at is set on send
            primed, self.runner.last_prime = self.runner.last_prime, None
            self.rec.emit(EventName.LLM_REQUEST, at=stream.request_at,
                          **({} if primed is None else {"primed": primed}))
        elif isinstance(ev, RoleChunk):
            self.rec.emit(EventName.LLM_FIRST_CHUNK, at=ev.t)
        elif isinstance(ev, TokenDelta):
            if not self.heard.raw:  # deltas are never empty: this is the first token
                self.rec.emit(EventName.LLM_FIRST_TOKEN, at=ev.t)
            self.heard.add_raw(ev.text)
            for sentence in chunker.feed(ev.text):
                self.release(sentence)
        elif isinstance(ev, Finished):
            self.finished = ev
            self.record_llm_end(stream)

    def record_llm_end(self, stream: ChatStream, hung_up: str | None = None) -> None:
        """The one place that records how the LLM's reply ended: the server finished it
        (``self.finished``), or we hung up (``hung_up``: max_sentences or bargein), and
        then, with timings_per_token, the last chunk read still tells prompt_n / cache_n."""
        if hung_up is not None:
            self.rec.emit(EventName.LLM_CLOSED, at=stream.closed_at or time.monotonic(),
                          reason=hung_up)
        if self.llm_ended:
            return
        self.llm_ended = True
        if self.finished is not None:
            end = self.finished
            self.rec.emit(EventName.LLM_END, at=end.t, finish_reason=end.finish_reason,
                          timings=end.timings, usage=end.usage)
        else:
            self.rec.emit(EventName.LLM_END, finish_reason=hung_up,
                          timings=stream.last_timings)

    def release(self, sentence: str) -> None:
        index = self.heard.add_sentence(sentence)
        self.rec.emit(EventName.SENTENCE, index=index, text=sentence)
        self.sentences.put((index, sentence))

    async def tts_stage(self) -> None:
        try:
            while (item := await self.sentences.get()) is not None:
                index, sentence = item
                self.rec.emit(EventName.TTS_START, index=index,
                              engine=engine_of(self.runner.tts))
                try:
                    audio = await asyncio.to_thread(self.synthesize, speakable(sentence))
                except Exception as e:
                    if self.interrupted.is_set():  # barge-in aborted Piper: not a fault
                        raise
                    # One sentence the voice cannot speak must not silence the rest: it
                    # is skipped (its text stays in the history, token for token) and
                    # reported, and the next sentence is synthesized.
                    log.warning("TTS failed on sentence %d: %s", index, e)
                    self.rec.emit(EventName.TTS_ERROR, index=index,
                                  message=f"{type(e).__name__}: {e}")
                    audio = np.zeros(0, dtype=np.int16)
                if index == 0:  # the reply's first sound: not a moment of silence before it
                    audio = trim_leading_silence(audio, self.runner.tts.sample_rate)
                self.heard.set_audio(index, len(audio))
                self.rec.emit(EventName.TTS_END, index=index,
                              audio_s=round(len(audio) / self.runner.tts.sample_rate, 3))
                self.audio.put((index, audio))
        finally:
            self.audio.close()

    def synthesize(self, text: str) -> np.ndarray:
        """Runs in a worker thread; remembers which, so barge-in can abort just this one."""
        self.tts_thread = threading.get_ident()
        try:
            return self.runner.tts.synthesize(text)
        finally:
            self.tts_thread = None  # the pool thread may next work for another session

    async def playback_stage(self) -> None:
        started = False
        while (item := await self.audio.get()) is not None:
            index, audio = item
            if len(audio) == 0:
                continue
            if not started:
                if self.confirmed is not None and not self.confirmed.is_set():
                    await self.confirmed.wait()  # speculative: ready, but not yet the end
                self.rec.emit(EventName.PLAYBACK_START, index=index)
                started = self.started_playing = True
            self.playing = True
            played = await self.runner.sink.play(audio)
            self.playing = False
            self.heard.set_played(index, played)
            if self.interrupted.is_set():
                self.rec.emit(EventName.PLAYBACK_STOPPED, index=index, played_samples=played)
                return
        if started:
            self.rec.emit(EventName.PLAYBACK_END)

    # -- barge-in -------------------------------------------------------------------
    def interrupt(self, source: str) -> None:
        if self.interrupted.is_set():
            return
        self.rec.emit(EventName.BARGEIN, source=source, playing=self.playing)
        self.stop()

    def abandon(self, reason: str) -> None:
        if self.interrupted.is_set():
            return
        self.dropped.set()
        self.rec.emit(EventName.SPECULATION_CANCELLED, reason=reason)
        self.stop()

    def stop(self) -> None:
        """Silence, drop TTS, hang up on the LLM (then confirm the slot idle)."""
        self.interrupted.set()
        self.runner.sink.stop()  # silence first: the user is talking
        if not self.playing:
            self.rec.emit(EventName.PLAYBACK_STOPPED, index=None, played_samples=0)
        self.tasks.cancel("tts")
        if self.tts_thread is not None:  # Piper can stop mid-sentence
            self.runner.tts.abort(self.tts_thread)
        if not self.playing:  # waiting for audio that will never come
            self.tasks.cancel("playback")
        self.hangup = self.tasks.spawn("hangup", self.hang_up())

    async def hang_up(self) -> None:
        self.tasks.cancel("llm")
        stream = self.stream
        if stream is not None and stream.closed_at is None:
            await stream.aclose()
            self.record_llm_end(stream, hung_up="speculation" if self.abandoned else "bargein")

    async def confirm_slot_idle(self) -> None:
        """Poll /slots until the turn's slot is idle: proof that the server stopped.

        With ``id_slot`` set only that slot counts (another conversation's busy slot is
        not ours); without it, any busy slot might be ours, so all must be idle. A server
        without /slots cannot show it: recorded as not verifiable, never as confirmed."""
        caps = self.runner.llm.caps
        if caps is not None and not caps.slots:
            self.rec.emit(EventName.SLOT_IDLE, confirmed=False, verifiable=False,
                          reason=NOT_VERIFIABLE)
            return
        try:
            idle = await self.runner.llm.wait_slot_idle(self.cfg.slot_idle_timeout,
                                                        slot=self.cfg.id_slot)
        except LlmError as e:
            self.rec.emit(EventName.SLOT_IDLE, confirmed=False, reason=str(e))
            return
        if idle is not None:
            self.rec.emit(EventName.SLOT_IDLE, confirmed=True)
        else:
            self.rec.emit(EventName.SLOT_IDLE, confirmed=False,
                          reason=f"slot still busy after {self.cfg.slot_idle_timeout:.1f} s")


def _overflow(e: LlmHttpError) -> tuple[int, int] | None:
    """(prompt tokens, context) of llama-server's 400 exceed_context_size_error (0, 0 when
    it does not say), or None when the error is something else."""
    import json

    if e.status != 400 or "exceed_context_size" not in e.body:
        return None
    try:
        error = json.loads(e.body).get("error", {})
        return int(error.get("n_prompt_tokens", 0)), int(error.get("n_ctx", 0))
    except (ValueError, AttributeError, TypeError):
        return 0, 0

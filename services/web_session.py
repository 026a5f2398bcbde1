"""One browser conversation over a WebSocket: its own TurnRunner, history and speaker.

Messages from the browser (JSON text frames unless noted)::

    {"type": "audio.begin", "sample_rate": 16000,   start an utterance (int16 mono PCM)
     "input_id": "c1"}
    <binary>                                        PCM frames of the open utterance, or a
                                                    whole WAV file (starts with RIFF)
    {"type": "audio.gap", "silence_ms": S,          hands-free: a short silence (S ms) in the
     "voiced_ms": V}                                open utterance after V ms of voice:
                                                    Whisper starts on the audio so far
    {"type": "audio.pause", "pause": N,             hands-free: the open utterance's N-th
     "silence_ms": S, "voiced_ms": V}               pause (S ms of silence so far): a
                                                    speculative turn starts on the audio so
                                                    far (with the gap's transcript if V is
                                                    the gap's: nothing voiced in between)
    {"type": "audio.resume", "pause": N,            the voice came back after pause N: that
     "silence_ms": S}                               speculation is abandoned
    {"type": "audio.end", "trailing_silence_ms": N} the user stopped: run the turn (N: the
                                                    page's endpoint wait, shown before t = 0),
                                                    or confirm the speculation that runs
    {"type": "audio.cancel"}                        drop the open utterance
    {"type": "interrupt", "by": "voice"}            barge-in: ``by`` "voice" when the user
                                                    began to speak over the reply (voice
                                                    onset, push-to-talk), absent for the
                                                    interrupt button / Escape / typing
    {"type": "text", "text": "...", "input_id": "c2"}  a typed turn (no ASR)
    {"type": "reset"}                               forget the history

``input_id`` (optional, a short string the page chooses) names the input: the server puts it
in every ``event``, ``turn.result`` and ``error`` about that input, so the page maps
errors and turns to what the user said without guessing.

Messages to the browser: ``hello`` (``speculate``: whether pauses start speculative
turns), ``audio.format``, ``event`` (the event dict of docs/contracts.md under ``"event"``),
``transcript`` (``rejoined`` and ``joined`` when the words of a cut turn go before it:
below), ``sentence``, binary audio frames, ``audio.stop``, ``turn.result`` (its
``id_slot``: the conversation's LLM slot; ``speculation``: what speculation did over the
utterance, services/web_live.py), ``endpoint`` (``input_id``, ``pause``, ``wait_ms``,
``reason``: end this utterance after ``wait_ms`` of silence), ``hold`` / ``ready``
(``input_id``, ``pause``; ``reason`` on ``ready``: a speculative turn runs on that pause, so
the page holds its end until its first audio is ready or it ended without), ``queued``
(every LLM slot is held by another conversation: ``position``, ``timeout_s``) and ``error``
(one line; the session goes on). ``event``, ``transcript`` and ``sentence`` messages of a
speculative turn not yet confirmed carry ``"speculative": true``: the page keeps that turn
out of sight, and its ``turn.result`` (``speculation.state`` ``cancelled`` or ``dropped``)
if it never is.

Messages beyond ``Limits.max_messages_per_s`` (over one second) are dropped with one error
per second, and an utterance they belonged to is dropped whole.

A new utterance while the assistant is still busy is a barge-in: it goes through
``BargeIn`` (the single decider), then the new turn runs once the old one has hung up.

The words before a cut are not lost (as in ``talk``, pipeline/rejoin.py): a turn cut by the
user's voice (``interrupt`` with ``by: "voice"``, or a streamed utterance ending while it
runs) before enough of its reply was heard to keep it (``committed`` false) leaves its user
message for the next streamed utterance, if that one's ``audio.begin`` came within
``REJOIN_S`` of the barge-in: the user message of that utterance's turn is the two
transcripts joined, its ``asr.end`` and ``turn.result`` carry ``rejoined: {text, turn}``
and its ``transcript`` message ``joined`` (the user message sent). Not after the interrupt
button, a typed message or WAV upload barging in, an abandoned speculation or the page
closing.

Pauses, the endpoint and confirming or abandoning a speculation: services/web_live.py;
Whisper from the gap: services/web_gap.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import logging
import tempfile
import time
import wave
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.audio_in import SAMPLE_RATE, AudioFileError, load_wav
from pipeline.bargein import BargeIn
from pipeline.conversation import Conversation
from pipeline.events import Event, EventName
from pipeline.pauses import PauseHabit
from pipeline.rejoin import CutWords, join_transcripts
from pipeline.tasks import TaskSet
from services.api_slots import Lease, QueueTimeout, SlotPool
from services.timeline import marks, rejoined_of, stage_spans
from services.web_live import PageSpeculator, Speculation, UtteranceSpeculation
from services.ws_sink import Outbox, WebSocketSink

if TYPE_CHECKING:
    from aiohttp import web

    from pipeline.turn import TurnResult
    from services.assistant import Assistant

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Limits:
    max_upload_bytes: int = 10 * 1024 * 1024  # a WAV upload (POST or one WS message)
    max_utterance_s: float = 60.0  # streamed PCM per utterance
    max_text_chars: int = 2000
    # Browsers send 20 ms PCM frames (50/s) plus a few control messages; far beyond that
    # is a runaway or hostile client, and each message costs the event loop.
    max_messages_per_s: float = 200.0


class ProtocolError(Exception):
    """A malformed or unexpected message: reported in one line, the session goes on."""

    def __init__(self, message: str, input_id: str | None = None) -> None:
        super().__init__(message)
        self.input_id = input_id  # the input it is about, if any


# --- audio decoding (shared with POST /api/turn) ---------------------------------------
def decode_wav_bytes(data: bytes, name: str) -> np.ndarray:
    """A WAV upload as float32 16 kHz mono (blocking: run in a thread).

    ``load_wav`` does the checking and PyAV the decoding/resampling; its one-line
    ``AudioFileError`` is re-issued under the upload's name rather than a temp path.
    """
    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        f.write(data)
        f.flush()
        try:
            return load_wav(f.name)
        except AudioFileError as e:
            raise AudioFileError(name, e.problem) from None


def decode_pcm16(data: bytes, sample_rate: int) -> np.ndarray:
    """Browser PCM (int16 LE mono) as float32 16 kHz; other rates go through PyAV."""
    data = data[:len(data) - len(data) % 2]
    if sample_rate == SAMPLE_RATE:
        return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(data)
    return decode_wav_bytes(buf.getvalue(), f"utterance at {sample_rate} Hz")


# --- one session ---------------------------------------------------------------------
@dataclass
class Utterance:
    sample_rate: int
    limit_bytes: int
    input_id: str | None = None
    began: float = field(default_factory=time.monotonic)  # its audio.begin: the voice began
    pcm: bytearray = field(default_factory=bytearray)
    overflowed: bool = False
    speculation: UtteranceSpeculation = field(default_factory=UtteranceSpeculation)
    gap_before_ms: float | None = None  # silence since the last utterance's voice ended


@dataclass
class TurnInput:
    t0: float  # monotonic time the user's audio ended (turn t = 0)
    text: str | None = None
    pcm: bytes | None = None
    sample_rate: int = SAMPLE_RATE
    wav: bytes | None = None
    name: str = "utterance"
    input_id: str | None = None
    speech_end_ms: float | None = None  # the page's endpoint wait: last voiced frame -> end
    speculation: Speculation | None = None  # a speculative turn, started at a pause
    utterance: UtteranceSpeculation | None = None  # hands-free audio: what speculation did
    began: float | None = None  # a streamed utterance: when its voice began (else None)
    gap_before_ms: float | None = None  # ... and the silence before it (Utterance's)


class BrowserSession:
    def __init__(self, session_id: str, assistant: Assistant, ws: web.WebSocketResponse,
                 limits: Limits, *, pool: SlotPool | None = None,
                 queue_timeout_s: float = 60.0,
                 on_queue: Callable[[float], None] | None = None,
                 on_result: Callable[[TurnResult, int], None] | None = None,
                 before_turn: Callable[[], Awaitable[None]] | None = None,
                 on_speculation: Callable[[str], None] | None = None,
                 speculate: bool = True, early_asr: bool = True) -> None:
        self.id = session_id
        self.pool = pool
        self.lease = Lease(session_id)
        self.queue_timeout_s = queue_timeout_s
        self.on_queue = on_queue
        self.on_result = on_result
        self.on_speculation = on_speculation  # a speculative turn ended: its outcome
        self.before_turn = before_turn  # e.g. wait out a restart of the LLM server
        self.turns_done = 0
        self._window_start = 0.0  # frame-rate limit: messages in the current second
        self._window_count = 0
        self._window_warned = False
        self.ws = ws
        self.limits = limits
        self.outbox = Outbox(ws)
        self.sink = WebSocketSink(self.outbox)
        self.sample_rate = assistant.tts.sample_rate
        # prime_next: the next prompt's start prefilled once a kept turn ends (TurnConfig).
        self.runner = assistant.runner(self.sink, Conversation(), listeners=[self.on_event],
                                       config=dataclasses.replace(assistant.config,
                                                                  prime_next=True))
        self.bargein = BargeIn(self.runner)
        self.runner.listeners.append(self.bargein.on_event)
        self.speculator = PageSpeculator(self.runner, self.outbox, enabled=speculate,
                                         early_asr=early_asr, pauses=PauseHabit())
        self.cuts = CutWords()  # the words of a turn the user's voice cut, not kept
        self._by_voice = False  # a barge-in by the user's voice is being triggered
        self.runner.listeners.append(self.speculator.on_event)
        self.inputs: asyncio.Queue[TurnInput] = asyncio.Queue()
        self.waiting = 0  # inputs queued that are not speculations
        self.utterance: Utterance | None = None
        # When the last utterance's voice ended (its audio.end less its trailing silence),
        # and the utterance whose gap before it PauseHabit was told (once per utterance).
        self._voice_ended: float | None = None
        self._gap_learned: float | None = None
        self.input_id: str | None = None  # of the turn running now
        self.tasks = TaskSet(f"session-{session_id}")

    async def serve(self) -> None:
        from aiohttp import WSMsgType

        await self.sink.open(self.sample_rate)
        self.outbox.json({"type": "hello", "session": self.id,
                          "input": {"sample_rate": SAMPLE_RATE, "encoding": "s16le"},
                          "limits": {"max_upload_bytes": self.limits.max_upload_bytes,
                                     "max_utterance_s": self.limits.max_utterance_s,
                                     "max_text_chars": self.limits.max_text_chars},
                          "speculate": self.speculator.enabled})
        self.tasks.spawn("writer", self.outbox.run())
        self.tasks.spawn("turns", self.run_turns())
        try:
            async for msg in self.ws:
                if not self.within_rate():
                    continue
                if msg.type == WSMsgType.TEXT:
                    self.receive(self.on_text, msg.data)
                elif msg.type == WSMsgType.BINARY:
                    self.receive(self.on_binary, msg.data)
        finally:
            # Hang up on the LLM first (a cancelled read would leave llama-server working).
            self.bargein.trigger("disconnect")
            await self.speculator.close()
            await self.tasks.cancel_all()
            await self.runner.drop_prime()
            await self.sink.close()
            if self.pool is not None:
                self.pool.release(self.lease)

    def within_rate(self) -> bool:
        now = time.monotonic()
        if now - self._window_start >= 1.0:
            self._window_start, self._window_count, self._window_warned = now, 0, False
        self._window_count += 1
        if self._window_count <= self.limits.max_messages_per_s:
            return True
        if not self._window_warned:
            self._window_warned = True
            utt = self.utterance
            if utt is not None:  # a gap in the PCM would be a corrupt utterance
                utt.overflowed = True
                utt.pcm.clear()
                self.speculator.resume("utterance dropped")
            self.error(f"too many messages: more than {self.limits.max_messages_per_s:g} "
                       "per second; dropped", utt.input_id if utt else None)
        return False

    def receive(self, handle: Callable[[Any], None], data: Any) -> None:
        try:
            handle(data)
        except ProtocolError as e:
            self.error(str(e), e.input_id)

    def error(self, message: str, input_id: str | None = None) -> None:
        log.info("session %s: %s", self.id, message)
        self.outbox.json({"type": "error", "message": message, "input_id": input_id})

    # -- incoming ---------------------------------------------------------------------
    def on_text(self, raw: str) -> None:
        try:
            msg = json.loads(raw)
        except ValueError:
            raise ProtocolError(f"malformed message (not JSON): {raw[:60]!r}") from None
        if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
            raise ProtocolError("malformed message: expected a JSON object with a \"type\"")
        handler = {"audio.begin": self.on_audio_begin, "audio.end": self.on_audio_end,
                   "audio.gap": self.on_audio_gap, "audio.pause": self.on_audio_pause,
                   "audio.resume": self.on_audio_resume,
                   "audio.cancel": self.on_audio_cancel, "interrupt": self.on_interrupt,
                   "text": self.on_typed, "reset": self.on_reset}.get(msg["type"])
        if handler is None:
            raise ProtocolError(f"unknown message type {msg['type']!r}")
        handler(msg)

    def on_audio_begin(self, msg: dict[str, Any]) -> None:
        rate = msg.get("sample_rate", SAMPLE_RATE)
        if not isinstance(rate, int) or isinstance(rate, bool) or not 8000 <= rate <= 96000:
            raise ProtocolError(f"audio.begin: sample_rate must be an integer 8000-96000 Hz, "
                                f"not {rate!r}")
        limit = int(self.limits.max_utterance_s * rate) * 2
        self.speculator.resume("a new utterance began")  # the last one never ended
        self.utterance = utt = Utterance(rate, limit, input_id(msg))
        if self._voice_ended is not None:
            utt.gap_before_ms = (utt.began - self._voice_ended) * 1000

    def _learn_gap(self, turn_input: TurnInput) -> None:
        """This utterance carries a cut turn's words: the silence before its voice was a
        pause inside the request, taken for its end (pipeline/pauses.py)."""
        pauses = self.speculator.pauses
        if (pauses is not None and turn_input.gap_before_ms is not None
                and self._gap_learned != turn_input.began):
            self._gap_learned = turn_input.began
            pauses.went_on(turn_input.gap_before_ms)

    def free(self) -> bool:
        """No other turn runs or waits: one that does is answered first (an abandoned
        speculation finishing its hang-up does not count; the next queues behind it)."""
        return self.waiting == 0 and (not self.runner.busy or self.runner.abandoning)

    def on_audio_gap(self, msg: dict[str, Any]) -> None:
        utt = self.open_utterance(msg)
        silence = self.silence_ms(msg, "audio.gap", "silence_ms", utt.input_id)
        voiced = self.silence_ms(msg, "audio.gap", "voiced_ms", utt.input_id)
        if utt.overflowed or not utt.pcm:
            return
        self.speculator.gap_in(utt.speculation, voiced, silence,
                               partial(decode_pcm16, bytes(utt.pcm), utt.sample_rate),
                               self.free())

    def on_audio_pause(self, msg: dict[str, Any]) -> None:
        utt = self.open_utterance(msg)
        pause = msg.get("pause")
        if not isinstance(pause, int) or isinstance(pause, bool) or pause < 1:
            raise ProtocolError(f"audio.pause: pause must be an integer >= 1, not {pause!r}",
                                utt.input_id)
        silence = self.silence_ms(msg, "audio.pause", "silence_ms", utt.input_id)
        # Optional (the gap's words, if the same): a page without gaps need not send it.
        voiced = (self.silence_ms(msg, "audio.pause", "voiced_ms", utt.input_id)
                  if "voiced_ms" in msg else None)
        if utt.overflowed or not utt.pcm:
            return
        spec = self.speculator.pause(utt.speculation, utt.input_id, pause, silence,
                                     self.free(), voiced)
        if spec is not None:
            self.inputs.put_nowait(TurnInput(spec.t0, pcm=bytes(utt.pcm),
                                             sample_rate=utt.sample_rate,
                                             input_id=utt.input_id, speech_end_ms=silence,
                                             speculation=spec, utterance=utt.speculation,
                                             began=utt.began,
                                             gap_before_ms=utt.gap_before_ms))

    def on_audio_resume(self, msg: dict[str, Any]) -> None:
        utt = self.open_utterance(msg)
        silence = self.silence_ms(msg, "audio.resume", "silence_ms", utt.input_id)
        self.speculator.resume(f"speech resumed after {silence:.0f} ms", silence)

    def open_utterance(self, msg: dict[str, Any]) -> Utterance:
        if self.utterance is None:
            raise ProtocolError(f"{msg['type']} without audio.begin")
        return self.utterance

    def silence_ms(self, msg: dict[str, Any], kind: str, key: str,
                   given: str | None) -> float:
        """A silence (or voice) the page measured, in ms: a number within the utterance
        limit."""
        value = msg.get(key, 0)
        if not isinstance(value, int | float) or isinstance(value, bool) \
                or not 0 <= value <= self.limits.max_utterance_s * 1000:
            raise ProtocolError(f"{kind}: {key} must be a number 0-"
                                f"{self.limits.max_utterance_s * 1000:g}, not {value!r}",
                                given)
        return float(value)

    def on_audio_end(self, msg: dict[str, Any]) -> None:
        t0 = time.monotonic()
        utt, self.utterance = self.utterance, None
        if utt is None:
            raise ProtocolError("audio.end without audio.begin")
        if utt.overflowed:
            return  # already reported when it overflowed
        if not utt.pcm:
            raise ProtocolError("audio.end: the utterance has no audio", utt.input_id)
        try:
            trailing = self.silence_ms(msg, "audio.end", "trailing_silence_ms", utt.input_id)
        except ProtocolError:
            self.speculator.resume("utterance dropped")
            raise
        self._voice_ended = t0 - trailing / 1000
        # The speculation started at the last pause is this utterance (its audio since is
        # the page's silence): it plays now. Otherwise a turn on the whole utterance.
        if self.speculator.end(trailing):
            return
        self.submit(TurnInput(t0, pcm=bytes(utt.pcm), sample_rate=utt.sample_rate,
                              input_id=utt.input_id,
                              # 0: push-to-talk, the release is the end (no wait to show)
                              speech_end_ms=trailing or None, utterance=utt.speculation,
                              began=utt.began, gap_before_ms=utt.gap_before_ms))

    def on_audio_cancel(self, msg: dict[str, Any]) -> None:
        self.speculator.resume("utterance cancelled")
        self.utterance = None

    def on_interrupt(self, msg: dict[str, Any]) -> None:
        if self.speculator.unconfirmed():
            return  # nothing is audible: only the utterance's end or resumption decides
        # "voice": the page heard the user begin to speak over the reply (the utterance
        # follows); anything else is the stop button, Escape or a typed message.
        by_voice = msg.get("by") == "voice"
        self.barge_in("voice" if by_voice else "browser", by_voice=by_voice)

    def barge_in(self, source: str, *, by_voice: bool) -> None:
        """``BargeIn.trigger``; ``by_voice``: the user spoke over the reply, so a turn this
        cuts before its reply could be kept leaves its words for the next utterance."""
        self._by_voice = by_voice
        try:
            self.bargein.trigger(source)
        finally:
            self._by_voice = False

    def on_typed(self, msg: dict[str, Any]) -> None:
        text, given = msg.get("text"), input_id(msg)
        if not isinstance(text, str) or not text.strip():
            raise ProtocolError("text: \"text\" must be a non-empty string", given)
        if len(text) > self.limits.max_text_chars:
            raise ProtocolError(f"text: longer than {self.limits.max_text_chars} characters",
                                given)
        self.submit(TurnInput(time.monotonic(), text=text.strip(), input_id=given))

    def on_reset(self, msg: dict[str, Any]) -> None:
        if self.runner.busy:
            raise ProtocolError("reset: a turn is running (interrupt it first)")
        self.runner.conversation = Conversation()

    def on_binary(self, data: bytes) -> None:
        utt = self.utterance
        if utt is None:
            if data[:4] != b"RIFF":
                raise ProtocolError("binary message outside audio.begin/audio.end and not "
                                    "a WAV file")
            if len(data) > self.limits.max_upload_bytes:
                raise ProtocolError(f"WAV message larger than "
                                    f"{self.limits.max_upload_bytes} bytes")
            self.submit(TurnInput(time.monotonic(), wav=data, name="uploaded WAV"))
            return
        if utt.overflowed:
            return
        if len(utt.pcm) + len(data) > utt.limit_bytes:
            utt.overflowed = True
            utt.pcm.clear()
            self.speculator.resume("utterance dropped")
            raise ProtocolError(f"utterance longer than {self.limits.max_utterance_s:g} s: "
                                "dropped", utt.input_id)
        utt.pcm.extend(data)

    def submit(self, turn_input: TurnInput) -> None:
        self.speculator.resume("another input")  # typed over an open utterance
        if self.runner.busy:  # speaking over the assistant (or typing): barge-in
            self.barge_in("new-utterance", by_voice=turn_input.pcm is not None)
        self.waiting += 1
        self.inputs.put_nowait(turn_input)

    # -- turns ------------------------------------------------------------------------
    async def run_turns(self) -> None:
        while True:
            turn_input = await self.inputs.get()
            if turn_input.speculation is None:
                self.waiting -= 1
            try:
                await self.run_turn(turn_input)
            except AudioFileError as e:
                self.error(str(e), turn_input.input_id)
            except Exception as e:  # a bug in one turn must not end the conversation
                log.exception("session %s: turn failed", self.id)
                self.error(f"internal error: {type(e).__name__}: {e}", turn_input.input_id)
            finally:
                self.input_id = None

    async def run_turn(self, turn_input: TurnInput) -> None:
        spec = turn_input.speculation
        result: TurnResult | None = None
        try:
            result = await self.run_runner(turn_input)
        finally:
            # None: the turn is the answer; else why a speculation is not (never shown)
            outcome = self.speculator.finished(spec, result) if spec is not None else None
            if spec is not None and self.on_speculation is not None:
                self.on_speculation(outcome or "confirmed")
        if result is None:
            return
        if outcome is None:  # the answer (not an abandoned or dropped speculation)
            self.cuts.finished(result, by_voice=self.cuts.voiced(result.turn))
            self.turns_done += 1
            if self.on_result is not None:
                self.on_result(result, self.turns_done)
        speculation = None
        if turn_input.utterance is not None:
            speculation = turn_input.utterance.to_dict()
            if outcome is not None:
                speculation["state"] = outcome
        self.outbox.json({**result_message(result), "input_id": turn_input.input_id,
                          "id_slot": self.lease.slot if self.pool is not None else None,
                          "speculation": speculation})

    async def run_runner(self, turn_input: TurnInput) -> TurnResult | None:
        """The turn on the runner (with this conversation's slot); None if it did not run."""
        spec = turn_input.speculation
        audio: np.ndarray | None = None
        if turn_input.wav is not None:
            audio = await asyncio.to_thread(decode_wav_bytes, turn_input.wav, turn_input.name)
        elif turn_input.pcm is not None:
            audio = await asyncio.to_thread(decode_pcm16, turn_input.pcm,
                                            turn_input.sample_rate)
        self.input_id = turn_input.input_id
        if self.before_turn is not None:
            await self.before_turn()
        if self.pool is not None:
            if spec is not None and not spec.confirmed.is_set():
                if not self.pool.try_acquire(self.lease):
                    return None  # no slot free now: no speculation, the end starts the turn
            elif not await self.claim_slot(turn_input.input_id):
                return None
        confirmed = None
        early = None
        if spec is not None:
            assert audio is not None
            begun = await self.speculator.early(spec)
            if not self.speculator.started(spec, audio, begun):
                return None  # speech resumed before it could start
            confirmed = spec.confirmed
            early = begun.transcript if begun is not None else None
        # The words of a turn cut just before, for a streamed utterance (its speculations
        # too); typed and WAV turns take none (and, once over, clear them).
        rejoined = (self.cuts.rejoined(turn_input.began) if turn_input.began is not None
                    else None)
        if rejoined is not None:
            self._learn_gap(turn_input)
        if self.pool is None:
            return await self.runner.run(audio, text=turn_input.text, t0=turn_input.t0,
                                         speech_end_ms=turn_input.speech_end_ms,
                                         confirmed=confirmed, early=early, rejoined=rejoined)
        base = self.runner.config
        self.runner.config = dataclasses.replace(base, id_slot=self.lease.slot)
        self.pool.begin(self.lease)
        try:
            return await self.runner.run(audio, text=turn_input.text, t0=turn_input.t0,
                                         speech_end_ms=turn_input.speech_end_ms,
                                         confirmed=confirmed, early=early, rejoined=rejoined)
        finally:
            self.runner.config = base
            self.pool.end(self.lease)

    async def claim_slot(self, given: str | None) -> bool:
        """This conversation's LLM slot (kept across turns); False after a queue timeout."""
        assert self.pool is not None
        if not self.pool.try_acquire(self.lease):
            self.outbox.json({"type": "queued", "position": len(self.pool.waiting) + 1,
                              "slots": self.pool.slots, "timeout_s": self.queue_timeout_s,
                              "input_id": given})
        try:
            waited = await self.pool.acquire(self.lease, self.queue_timeout_s)
        except QueueTimeout as e:
            self.error(f"{e}: try again later", given)
            return False
        if self.on_queue is not None:
            self.on_queue(waited)
        return True

    # -- outgoing ---------------------------------------------------------------------
    def on_event(self, ev: Event) -> None:
        # A speculation not yet confirmed may still be abandoned: the page keeps it hidden.
        hidden = {"speculative": True} if self.speculator.unconfirmed() else {}
        self.outbox.json({"type": "event", "event": ev.to_dict(), "input_id": self.input_id,
                          **hidden})
        if ev.name == EventName.BARGEIN and self._by_voice:
            self.cuts.barged_in(ev.turn)
        if ev.name == EventName.ASR_END:
            text = str(ev.data.get("text", ""))
            rejoined = ev.data.get("rejoined")
            # The user message sent: the cut turn's words, then these (TurnRunner's join).
            joined = ({"rejoined": rejoined,
                       "joined": join_transcripts(str(rejoined["text"]), text)}
                      if isinstance(rejoined, dict) else {})
            self.outbox.json({"type": "transcript", "turn": ev.turn, "text": text,
                              **joined, **hidden})
        elif ev.name == EventName.SENTENCE:
            self.outbox.json({"type": "sentence", "turn": ev.turn,
                              "index": ev.data.get("index"), "text": ev.data.get("text"),
                              **hidden})


def input_id(msg: dict[str, Any]) -> str | None:
    """The page's name for this input (optional; echoed back, never interpreted)."""
    value = msg.get("input_id")
    if value is None or (isinstance(value, str) and 0 < len(value) <= 64):
        return value
    raise ProtocolError(f"{msg['type']}: \"input_id\" must be a string of 1-64 characters")


def result_message(result: TurnResult) -> dict[str, Any]:
    spans = stage_spans(result.events)
    end = max([b for row in spans.values() for _, b in row]
              + [e.t for e in result.events] + [0.0])
    # The endpoint wait (the user's last voiced sample -> the end of the utterance, t = 0)
    # is its own span before t = 0.
    # A speculative turn starts at the pause and its endpoint is confirmed later: the span
    # runs from the last voiced sound across t = 0 to the confirmation.
    start = next((e for e in result.events if e.name == EventName.TURN_START), None)
    wait_ms = start.data.get("speech_end_ms") if start is not None else None
    confirmed = next((e.t for e in result.events
                      if e.name == EventName.SPECULATION_CONFIRMED), 0.0)
    if isinstance(wait_ms, int | float) and wait_ms > 0:
        spans = {"endpoint": [(-wait_ms / 1000, confirmed)], **spans}
    return {"type": "turn.result", "turn": result.turn, "mode": result.mode,
            "transcript": result.transcript, "rejoined": rejoined_of(result.events),
            "reply": result.reply, "heard": result.heard,
            "interrupted": result.interrupted, "abandoned": result.abandoned,
            "error": result.error, "metrics": result.metrics.to_dict(),
            "timeline": {"start": round(min([a for row in spans.values() for a, _ in row]
                                            + [0.0]), 4),
                         "end": round(end, 4),
                         "spans": {k: [[round(a, 4), round(b, 4)] for a, b in v]
                                   for k, v in spans.items()},
                         "marks": {k: [round(t, 4) for t in v]
                                   for k, v in marks(result.events).items()}}}


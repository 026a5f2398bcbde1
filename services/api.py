"""The machine API of ``serve``: named sessions and streamed turns (docs/api.md).

Routes (JSON errors are ``{"error": "one line", "kind": "..."}`` with a 4xx/5xx status)::

    POST   /v1/sessions                 create -> 201 {"id", "slot", ...}
    GET    /v1/sessions/{id}            the history as heard, the turns' records
    DELETE /v1/sessions/{id}            forget it (its LLM slot goes to the next in line)
    POST   /v1/sessions/{id}/turns      WAV body (audio/wav) or JSON {"text"}: NDJSON stream
    POST   /v1/sessions/{id}/interrupt  barge in on the running turn

A turn answers ``application/x-ndjson``, one JSON object per line as the turn happens:
``queued`` (only when every slot is held), ``slot``, ``event`` (the timing events of
docs/contracts.md), ``transcript``, ``sentence``, ``audio`` (base64 PCM16 LE mono with its
``sample_rate``), and ``result`` last (transcript, reply, heard, error, metrics). A client
that hangs up mid-turn is a barge-in: the LLM stream is closed and the history keeps only
the audio already sent.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import web

from pipeline.audio_out import InstantSink
from pipeline.bargein import BargeIn
from pipeline.events import Event, EventName
from pipeline.heard import worth_keeping
from services.api_slots import Lease, QueueTimeout, SlotPool

if TYPE_CHECKING:
    from pipeline.turn import TurnConfig, TurnResult, TurnRunner

log = logging.getLogger(__name__)

NDJSON = "application/x-ndjson"
WAV_TYPES = ("audio/wav", "audio/x-wav", "audio/wave", "audio/vnd.wave",
             "application/octet-stream")
MAX_TOKENS_LIMIT = 1024
AUDIO_CHUNK = 8192  # samples per audio line: 0.37 s at 22 050 Hz, 22 kB of base64


class ApiError(Exception):
    """A client mistake: the status, a kind for scripts and /metrics, one line."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(" ".join(message.split()))
        self.status = status
        self.kind = kind

    def response(self) -> web.Response:
        return web.json_response({"error": str(self), "kind": self.kind}, status=self.status)


# --- the sink: machines play the audio themselves --------------------------------------
class StreamSink(InstantSink):
    """An ``AudioSink`` that hands each block to the turn's NDJSON stream at once.

    ``InstantSink``'s semantics: audio counts as played when it is handed over (the client
    has it); after ``stop()`` nothing more is handed over, so the history ends where the
    client's audio ends."""

    def __init__(self) -> None:
        super().__init__()
        self.emit: Callable[[dict[str, Any]], None] | None = None

    async def play(self, samples: np.ndarray) -> int:
        played = await super().play(samples)
        if played and self.emit is not None:
            # The playback stage hands over a whole sentence (10 s of audio is 600 kB of
            # base64); lines of at most AUDIO_CHUNK samples keep each one small enough for
            # ordinary line readers and let a client start playing sooner.
            pcm = np.asarray(samples).astype("<i2", copy=False)
            for start in range(0, pcm.size, AUDIO_CHUNK):
                block = pcm[start:start + AUDIO_CHUNK]
                self.emit({"type": "audio", "sample_rate": self.sample_rate,
                           "encoding": "pcm16le", "samples": int(block.size),
                           "data": base64.b64encode(block.tobytes()).decode("ascii")})
        return played


# --- options ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TurnOptions:
    mode: str | None = None
    max_tokens: int | None = None
    max_sentences: int | None = None

    def apply(self, config: TurnConfig, id_slot: int | None) -> TurnConfig:
        changes: dict[str, Any] = {"id_slot": id_slot}
        if self.max_tokens is not None:
            changes["max_tokens"] = self.max_tokens
        if self.max_sentences is not None:
            changes["max_sentences"] = self.max_sentences
        return dataclasses.replace(config, **changes)


def parse_options(values: dict[str, Any]) -> TurnOptions:
    """Per-turn options from the query string or the JSON body; 400 on a bad value."""
    mode = values.get("mode")
    if mode not in (None, "streamed", "serial"):
        raise ApiError(400, "bad_option", f"mode must be streamed or serial, not {mode!r}")
    return TurnOptions(mode, int_option(values, "max_tokens", 1, MAX_TOKENS_LIMIT),
                       int_option(values, "max_sentences", 1, 50))


def int_option(values: dict[str, Any], name: str, low: int, high: int) -> int | None:
    raw = values.get(name)
    if raw is None:
        return None
    try:
        value = int(raw) if not isinstance(raw, bool) else None
    except (TypeError, ValueError):
        value = None
    if value is None or (isinstance(raw, float) and raw != value) or not low <= value <= high:
        raise ApiError(400, "bad_option", f"{name} must be an integer {low}-{high}, "
                                          f"not {raw!r}")
    return value


# --- sessions --------------------------------------------------------------------------
@dataclass
class ApiSession:
    id: str
    runner: TurnRunner
    sink: StreamSink
    lease: Lease
    bargein: BargeIn
    created: float = field(default_factory=time.time)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    records: list[dict[str, Any]] = field(default_factory=list)
    emit: Callable[[dict[str, Any]], None] | None = None  # the running turn's stream
    last: TurnResult | None = None
    played_report: int | None = None  # samples the client played, told mid-turn

    def report_played(self, played: int) -> bool | None:
        """The client played only ``played`` samples of its reply audio (it interrupted
        its own playback). A running turn applies it when it ends, before its result
        line (None); otherwise the last turn is cut now (True when that shortened it)."""
        if self.runner.busy:
            self.played_report = played
            return None
        return self.cut_heard(played)

    def cut_heard(self, played: int) -> bool:
        """The history, and the last turn's record, keep only the ``played`` samples of
        the reply, marked as interrupted, as a barge-in keeps what was heard."""
        last = self.last
        if last is None or last.spoken is None or not last.committed \
                or not last.spoken.cut_at(played):
            return False
        heard = last.spoken.heard_text()
        history = self.runner.conversation
        keep = worth_keeping(heard)
        # Too little heard: the pair goes, as for a turn barged in on that early.
        if not (history.amend_last_reply(last.spoken.heard_raw()) if keep
                else history.drop_last_turn()):
            return False
        last.heard, last.interrupted, last.committed = heard, True, keep
        if self.records:
            self.records[-1].update(heard=last.heard, played_samples=played)
        return True

    def on_event(self, ev: Event) -> None:
        if self.emit is None:
            return
        self.emit({"type": "event", "event": ev.to_dict()})
        if ev.name == EventName.ASR_END:
            self.emit({"type": "transcript", "text": ev.data.get("text", "")})
        elif ev.name == EventName.SENTENCE:
            self.emit({"type": "sentence", "index": ev.data.get("index"),
                       "text": ev.data.get("text")})

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "created": round(self.created, 3), "slot": self.lease.slot,
                "busy": self.runner.busy, "turns": len(self.records),
                "history": list(self.runner.conversation.history),
                "records": list(self.records)}


def new_session(session_id: str, make_runner: Callable[[StreamSink], TurnRunner]
                ) -> ApiSession:
    sink = StreamSink()
    runner = make_runner(sink)
    session = ApiSession(session_id, runner, sink, Lease(session_id), BargeIn(runner))
    runner.listeners.extend([session.on_event, session.bargein.on_event])
    return session


@dataclass
class TurnRequest:
    t0: float  # the whole input is in: the user's audio has ended (turn t = 0)
    options: TurnOptions
    audio: np.ndarray | None = None
    text: str | None = None


async def run_streamed_turn(request: web.Request, session: ApiSession, turn: TurnRequest,
                            pool: SlotPool | None, *, queue_timeout: float,
                            on_queue: Callable[[float], None],
                            on_result: Callable[[TurnResult, int], None]) -> web.StreamResponse:
    """The NDJSON answer of one turn, written as the turn happens."""
    lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    response = web.StreamResponse(headers={"Content-Type": NDJSON,
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    session.emit = session.sink.emit = lines.put_nowait
    base_config = session.runner.config
    task: asyncio.Task[TurnResult | None] | None = None

    async def turn_task() -> TurnResult | None:
        try:
            if pool is not None:
                if not pool.try_acquire(session.lease):
                    lines.put_nowait({"type": "queued", "position": len(pool.waiting) + 1,
                                      "slots": pool.slots,
                                      "timeout_s": queue_timeout})
                try:
                    waited = await pool.acquire(session.lease, queue_timeout)
                except QueueTimeout as e:
                    lines.put_nowait({"type": "error", "kind": "queue_timeout",
                                      "error": f"{e}: try again later"})
                    return None
                on_queue(waited)
                lines.put_nowait({"type": "slot", "id_slot": session.lease.slot,
                                  "queue_wait_ms": round(waited * 1000, 1)})
                pool.begin(session.lease)
            slot = session.lease.slot
            session.runner.config = turn.options.apply(base_config, slot)
            session.played_report = None
            try:
                result = await session.runner.run(turn.audio, text=turn.text, t0=turn.t0,
                                                  mode=turn.options.mode)
            finally:
                session.runner.config = base_config
                if pool is not None:
                    pool.end(session.lease)
            # No await since run() returned (runner.busy went False inside it): a played
            # report is either in or comes after, and then cuts the last turn itself.
            session.last = result
            session.records.append({**result.record(f"turn {result.turn}"), "id_slot": slot})
            if session.played_report is not None:
                session.cut_heard(session.played_report)
            on_result(result, len(session.records))
            lines.put_nowait({"type": "result", "turn": result.turn, "mode": result.mode,
                              "transcript": result.transcript, "reply": result.reply,
                              "heard": result.heard, "interrupted": result.interrupted,
                              "error": result.error, "id_slot": slot,
                              "metrics": result.metrics.to_dict()})
            return result
        finally:
            lines.put_nowait(None)

    try:
        task = asyncio.create_task(turn_task(), name=f"api-turn-{session.id}")
        while (line := await lines.get()) is not None:
            await response.write(json.dumps(line, ensure_ascii=False,
                                            default=str).encode() + b"\n")
        await task
        await response.write_eof()
    except (ConnectionError, asyncio.CancelledError):
        # The client hung up (or the server stops): a barge-in, so the LLM stream is
        # closed and the history keeps what was already sent.
        session.bargein.trigger("disconnect")
        if task is not None and not task.done():
            await asyncio.shield(task)
        raise
    finally:
        session.emit = session.sink.emit = None
    return response

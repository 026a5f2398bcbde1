"""``voice-llm serve``: the assistant as an aiohttp service with a browser page.

Routes::

    GET  /           the page (services/static/index.html + app.js + style.css)
    GET  /health     {"status": "ok", "sessions": N}
    GET  /metrics    Prometheus text format (services.prom)
    GET  /ws         one WebSocket per browser tab = one conversation (services.web_session)
    /v1/sessions...  named sessions and NDJSON-streamed turns (services.api, docs/api.md)
    POST /api/turn   a WAV (raw body or multipart field) -> {transcript, reply, metrics}
    POST /api/reset  forget the /api/turn conversation

Uploads larger than ``max_upload_bytes`` get 413 and a broken WAV 400, each with a one-line
JSON ``{"error": ...}``; the conversation is untouched by either. With ``api_key`` set every
route but the page, its static files and /health needs ``Authorization: Bearer KEY`` (the
page passes ``?key=`` on to its WebSocket). With ``slots`` set, each conversation gets its
own llama-server slot for its life (services.api_slots). A failed turn has the managed
llama-server checked, and restarted if it died (services.supervisor.SharedCheck).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hmac
import itertools
import json
import logging
import os
import secrets
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import BodyPartReader, web

from pipeline.audio_in import AudioFileError
from pipeline.audio_out import InstantSink
from pipeline.conversation import Conversation
from services import api as v1
from services.api_rate import DEFAULT_PER_MINUTE, RateLimiter, client_id, retry_after_header
from services.api_slots import (
    DEFAULT_IDLE_LEASE_S,
    DEFAULT_QUEUE_TIMEOUT_S,
    Lease,
    QueueTimeout,
    SlotPool,
)
from services.engines import add_engine_options
from services.errors import UserError
from services.prom import CONTENT_TYPE as PROM_CONTENT_TYPE
from services.prom import ServiceMetrics
from services.supervisor import SharedCheck, Supervisor
from services.turn_options import STOP_SIGNALS, add_asr_window_option
from services.web_session import BrowserSession, Limits, decode_wav_bytes

if TYPE_CHECKING:
    from pipeline.turn import TurnResult, TurnRunner
    from services.assistant import Assistant

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
DEFAULT_MAX_UPLOAD_BYTES = 10 * 1024 * 1024


# --- the app ---------------------------------------------------------------------------
@dataclass
class ApiConversation:
    """The one conversation behind POST /api/turn; turns run one at a time."""

    runner: TurnRunner
    sink: InstantSink
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    lease: Lease = field(default_factory=lambda: Lease("api-turn"))
    turns: int = 0


@dataclass
class AppState:
    assistant: Assistant
    limits: Limits
    api: ApiConversation
    metrics: ServiceMetrics
    pool: SlotPool | None = None
    api_key: str | None = None
    max_sessions: int = 16
    queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S
    rate: RateLimiter | None = None
    supervision: SharedCheck | None = None
    speculate: bool = True  # the page's pauses start speculative turns (services/web_live.py)
    early_asr: bool = True  # Whisper starts at the page's gaps (services/web_gap.py)
    sessions: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    sockets: dict[str, web.WebSocketResponse] = field(default_factory=dict)
    api_sessions: dict[str, v1.ApiSession] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    @property
    def open_sessions(self) -> int:
        return len(self.sessions) + len(self.api_sessions)

    def count(self, interface: str) -> int:
        return len(self.api_sessions) if interface == "api" else len(self.sessions)

    def turn_done(self, result: TurnResult, interface: str, turn_index: int) -> None:
        """Every finished turn: its metrics; a failed one has the LLM server checked."""
        self.metrics.record_turn(result, interface, turn_index)
        if result.error is not None and self.supervision is not None:
            self.supervision.turn_failed()

    async def llm_ready(self) -> None:
        """Before a turn: wait out a restart of the LLM server under way."""
        if self.supervision is not None:
            await self.supervision.ready()


STATE = web.AppKey("voice_llm_state", AppState)


def create_app(assistant: Assistant, *, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
               max_utterance_s: float = 60.0, slots: int | None = None,
               api_key: str | None = None, max_sessions: int = 16,
               queue_timeout_s: float = DEFAULT_QUEUE_TIMEOUT_S,
               idle_lease_s: float = DEFAULT_IDLE_LEASE_S,
               ws_max_messages_per_s: float = 200.0,
               rate_limit_per_minute: int = DEFAULT_PER_MINUTE,
               supervisor: Supervisor | None = None,
               speculate: bool = True, early_asr: bool = True) -> web.Application:
    limits = Limits(max_upload_bytes=max_upload_bytes, max_utterance_s=max_utterance_s,
                    max_messages_per_s=ws_max_messages_per_s)
    sink = InstantSink()
    legacy = ApiConversation(assistant.runner(sink, Conversation()), sink)
    # The body limit is enforced by read_upload (with a JSON 413); this one only has to
    # let multipart framing through.
    app = web.Application(client_max_size=max_upload_bytes + 64 * 1024,
                          middlewares=[auth_middleware])
    pool = SlotPool(slots, idle_lease_s=idle_lease_s) if slots else None
    state = AppState(assistant, limits, legacy, ServiceMetrics(), pool, api_key or None,
                     max_sessions, queue_timeout_s,
                     RateLimiter(rate_limit_per_minute) if rate_limit_per_minute else None,
                     speculate=speculate, early_asr=early_asr)
    if supervisor is not None:
        state.supervision = SharedCheck(supervisor,
                                        lambda line: state.metrics.llm_restarts.inc())
    state.metrics.watch(sessions=state.count,
                        queued=lambda: len(pool.waiting) if pool else 0,
                        slots_in_use=lambda: pool.in_use if pool else 0,
                        slots_total=slots or 0)
    app[STATE] = state
    app.router.add_get("/", index)
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/ws", websocket)
    app.router.add_post("/api/turn", api_turn)
    app.router.add_post("/api/reset", api_reset)
    app.router.add_post("/v1/sessions", create_session)
    app.router.add_get("/v1/sessions/{id}", get_session)
    app.router.add_delete("/v1/sessions/{id}", delete_session)
    app.router.add_post("/v1/sessions/{id}/turns", session_turn)
    app.router.add_post("/v1/sessions/{id}/interrupt", interrupt_session)
    app.router.add_static("/static", STATIC_DIR, append_version=True)
    app.on_shutdown.append(close_sessions)
    return app


PUBLIC_PATHS = ("/", "/health")
# What costs the server work: a new conversation or a turn (--rate-limit). Interrupts and
# DELETE are never refused: they free resources.
RATE_LIMITED = {("POST", "/v1/sessions"), ("POST", "/v1/sessions/{id}/turns"),
                ("POST", "/api/turn"), ("POST", "/api/reset"), ("GET", "/ws")}


@web.middleware
async def auth_middleware(request: web.Request,
                          handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                          ) -> web.StreamResponse:
    state = request.app[STATE]
    key = state.api_key
    public = request.path in PUBLIC_PATHS or request.path.startswith("/static/")
    if key is not None and not public:
        if (denied := _check_key(request, key)) is not None:
            state.metrics.error("unauthorized")
            return denied
    if state.rate is not None and (denied := _check_rate(request, state.rate)) is not None:
        state.metrics.error("rate_limited")
        return denied
    try:
        return await handler(request)
    except v1.ApiError as e:
        state.metrics.error(e.kind)
        return e.response()


def _check_rate(request: web.Request, rate: RateLimiter) -> web.Response | None:
    route = request.match_info.route.resource
    if route is None or (request.method, route.canonical) not in RATE_LIMITED:
        return None
    wait = rate.check(client_id(request.headers.get("Authorization", ""), request.remote))
    if wait is None:
        return None
    retry = retry_after_header(wait)
    return web.json_response(
        {"error": f"rate limit: more than {rate.per_minute} session/turn requests in 60 s "
                  f"from this client; retry in {retry} s (serve --rate-limit)",
         "kind": "rate_limited", "retry_after_s": int(retry)},
        status=429, headers={"Retry-After": retry})


def _check_key(request: web.Request, key: str) -> web.Response | None:
    header = request.headers.get("Authorization", "")
    given = header[7:] if header.startswith("Bearer ") else None
    if given is None and request.path == "/ws":
        given = request.query.get("key")  # browsers cannot set headers on a WebSocket
    if given is not None and hmac.compare_digest(given.encode(), key.encode()):
        return None
    return web.json_response(
        {"error": "missing or wrong API key: send 'Authorization: Bearer KEY'",
         "kind": "unauthorized"}, status=401, headers={"WWW-Authenticate": "Bearer"})


async def metrics(request: web.Request) -> web.Response:
    body = request.app[STATE].metrics.render()
    return web.Response(body=body, headers={"Content-Type": PROM_CONTENT_TYPE})


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html",
                            headers={"Cache-Control": "no-cache"})


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response({"status": "ok", "sessions": len(state.sessions),
                              "api_sessions": len(state.api_sessions),
                              "slots": state.pool.slots if state.pool else None,
                              "queued": len(state.pool.waiting) if state.pool else 0,
                              # for leak checks (scripts/load_serve.py before/after)
                              "tasks": len(asyncio.all_tasks()),
                              "llm_url": state.assistant.llm_url})


# --- WebSocket sessions ----------------------------------------------------------------
async def websocket(request: web.Request) -> web.WebSocketResponse:
    state = request.app[STATE]
    if state.open_sessions >= state.max_sessions:
        raise too_many_sessions(state)
    # Heartbeat: a laptop that sleeps mid-turn is noticed and its turn hung up.
    # Messages up to twice the upload limit get a one-line error from the session; only
    # beyond that does aiohttp close the socket (1009, message too big).
    ws = web.WebSocketResponse(heartbeat=20.0,
                               max_msg_size=2 * state.limits.max_upload_bytes + 1024)
    await ws.prepare(request)
    session_id = f"s{next(state.ids)}"
    session = BrowserSession(session_id, state.assistant, ws, state.limits, pool=state.pool,
                             queue_timeout_s=state.queue_timeout_s,
                             on_queue=state.metrics.queue_wait.observe,
                             on_result=lambda r, n: state.turn_done(r, "ws", n),
                             before_turn=state.llm_ready, speculate=state.speculate,
                             early_asr=state.early_asr,
                             on_speculation=lambda outcome:
                             state.metrics.speculations.labels(outcome).inc())
    task = asyncio.create_task(session.serve(), name=f"ws-session-{session_id}")
    state.sessions[session_id] = task
    state.sockets[session_id] = ws
    task.add_done_callback(lambda t: _forget_session(state, session_id, t))
    log.info("session %s opened from %s", session_id, request.remote)
    await task  # if the handler is cancelled, so is the session (its finally cleans up)
    return ws


def _forget_session(state: AppState, session_id: str, task: asyncio.Task[None]) -> None:
    state.sessions.pop(session_id, None)
    state.sockets.pop(session_id, None)
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("session %s failed", session_id, exc_info=exc)
    log.info("session %s closed", session_id)


def too_many_sessions(state: AppState) -> v1.ApiError:
    return v1.ApiError(429, "too_many_sessions",
                        f"too many sessions: {state.max_sessions} are open (close one, "
                        "or raise --max-sessions)")


async def close_sessions(app: web.Application) -> None:
    from aiohttp import WSCloseCode

    state = app[STATE]
    for session in list(state.api_sessions.values()):
        session.bargein.trigger("shutdown")
    for ws in list(state.sockets.values()):
        await ws.close(code=WSCloseCode.GOING_AWAY, message=b"server shutdown")
    if state.sessions:
        await asyncio.wait(list(state.sessions.values()), timeout=5.0)


# --- POST /api/turn ----------------------------------------------------------------------
def json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": " ".join(message.split())}, status=status)


class UploadError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


async def read_upload(request: web.Request, limit: int) -> tuple[bytes, str]:
    """The WAV bytes and a name for messages; raw body or the first multipart file."""
    too_big = UploadError(413, f"upload too large: the limit is {limit} bytes")
    if request.content_length is not None and request.content_length > limit + 64 * 1024:
        raise too_big
    if request.content_type.startswith("multipart/"):
        reader = await request.multipart()
        async for part in reader:
            if isinstance(part, BodyPartReader) and (part.filename
                                                         or part.name == "audio"):
                name = part.filename or "audio"
                return await _read_limited(part.read_chunk, limit, too_big), name
        raise UploadError(400, "multipart upload has no file (send the WAV as field "
                               "'audio')")
    return await _read_limited(request.content.read, limit, too_big), "upload.wav"


async def _read_limited(read: Callable[[int], Awaitable[bytes]], limit: int,
                        too_big: UploadError) -> bytes:
    data = bytearray()
    while chunk := await read(64 * 1024):
        data.extend(chunk)
        if len(data) > limit:
            raise too_big
    return bytes(data)


async def api_turn(request: web.Request) -> web.Response:
    state = request.app[STATE]
    mode = request.query.get("mode")
    if mode not in (None, "streamed", "serial"):
        return json_error(400, f"mode must be streamed or serial, not {mode!r}")
    try:
        data, name = await read_upload(request, state.limits.max_upload_bytes)
    except UploadError as e:
        return json_error(e.status, str(e))
    t0 = time.monotonic()  # the whole upload is in: the user's audio has ended
    if not data:
        return json_error(400, "empty body: send a WAV as the body or as multipart "
                               "field 'audio'")
    try:
        audio = await asyncio.to_thread(decode_wav_bytes, data, name)
    except AudioFileError as e:
        return json_error(400, str(e))
    legacy = state.api
    async with legacy.lock:
        await state.llm_ready()
        slot = None
        if state.pool is not None:
            try:
                state.metrics.queue_wait.observe(
                    await state.pool.acquire(legacy.lease, state.queue_timeout_s))
            except QueueTimeout as e:
                state.metrics.error("queue_timeout")
                return json_error(503, f"{e}: try again later")
            slot = legacy.lease.slot
            state.pool.begin(legacy.lease)
        base = legacy.runner.config
        legacy.runner.config = dataclasses.replace(base, id_slot=slot)
        try:
            before = legacy.sink.samples
            result = await legacy.runner.run(audio, t0=t0, mode=mode)
            audio_s = (legacy.sink.samples - before) / state.assistant.tts.sample_rate
        finally:
            legacy.runner.config = base
            if state.pool is not None:
                state.pool.end(legacy.lease)
        legacy.turns += 1
        state.turn_done(result, "api", legacy.turns)
    body = {"transcript": result.transcript, "reply": result.reply,
            "error": result.error, "audio_s": round(audio_s, 3),
            "metrics": result.metrics.to_dict()}
    # No transcript: the user's audio held nothing usable; otherwise a backend stage failed.
    status = 200 if result.error is None else (422 if not result.transcript else 502)
    return web.json_response(body, status=status)


async def api_reset(request: web.Request) -> web.Response:
    legacy = request.app[STATE].api
    async with legacy.lock:
        legacy.runner.conversation = Conversation()
        legacy.turns = 0
    return web.json_response({"status": "ok"})


# --- /v1/sessions (services/api.py, docs/api.md) ------------------------------------------
async def create_session(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.open_sessions >= state.max_sessions:
        raise too_many_sessions(state)
    session_id = f"a{next(state.ids)}-{secrets.token_hex(4)}"
    session = v1.new_session(session_id,
                              lambda sink: state.assistant.runner(sink, Conversation()))
    await session.sink.open(state.assistant.tts.sample_rate)
    state.api_sessions[session_id] = session
    if state.pool is not None:
        state.pool.try_acquire(session.lease)  # a free slot now; otherwise at its 1st turn
    log.info("api session %s created", session_id)
    return web.json_response({"id": session_id, "slot": session.lease.slot,
                              "slots": state.pool.slots if state.pool else None,
                              "sample_rate": state.assistant.tts.sample_rate},
                             status=201)


def find_session(request: web.Request) -> v1.ApiSession:
    state = request.app[STATE]
    session = state.api_sessions.get(request.match_info["id"])
    if session is None:
        raise v1.ApiError(404, "unknown_session",
                           f"no session {request.match_info['id']!r} (create one with "
                           "POST /v1/sessions)")
    return session


async def get_session(request: web.Request) -> web.Response:
    return web.json_response(find_session(request).describe(), dumps=_dumps)


async def delete_session(request: web.Request) -> web.Response:
    state = request.app[STATE]
    session = find_session(request)
    del state.api_sessions[session.id]
    session.bargein.trigger("deleted")  # a running turn hangs up; its stream ends
    if state.pool is not None:
        state.pool.release(session.lease)
    log.info("api session %s deleted", session.id)
    return web.json_response({"id": session.id, "deleted": True})


async def interrupt_session(request: web.Request) -> web.Response:
    """Barge in on the running turn. A client that plays the audio itself may say how
    much it played (``{"played_samples": N}``) so the history keeps only that."""
    session = find_session(request)
    played = await _read_played(request)
    answer: dict[str, Any] = {"interrupted": session.bargein.trigger("api")}
    if played is not None:
        answer["cut"] = session.report_played(played)
        answer["played_samples"] = played
    return web.json_response(answer)


async def _read_played(request: web.Request) -> int | None:
    if not request.can_read_body:
        return None
    if request.content_type != "application/json":
        raise v1.ApiError(415, "unsupported_media_type",
                          'send no body or application/json {"played_samples": N}')
    body = await _read_json_object(request, 1024)
    return v1.int_option(body, "played_samples", 0, 10**9)


async def _read_json_object(request: web.Request, limit: int) -> dict[str, Any]:
    try:
        body = json.loads(await _read_body(request, limit))
    except ValueError:
        raise v1.ApiError(400, "bad_json", "body is not valid JSON") from None
    if not isinstance(body, dict):
        raise v1.ApiError(400, "bad_json", "body must be a JSON object")
    return body


async def session_turn(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    session = find_session(request)
    if session.lock.locked():
        raise v1.ApiError(409, "turn_running", "a turn is already running in this "
                           "session (wait for its result, or POST .../interrupt)")
    async with session.lock:
        turn = await read_turn(request, state)
        await state.llm_ready()
        return await v1.run_streamed_turn(
            request, session, turn, state.pool, queue_timeout=state.queue_timeout_s,
            on_queue=state.metrics.queue_wait.observe,
            on_result=lambda r, n: state.turn_done(r, "api", n))


async def read_turn(request: web.Request, state: AppState) -> v1.TurnRequest:
    """The turn's input and options; every client mistake is an ``ApiError``."""
    ctype = request.content_type
    if ctype == "application/json":
        body = await _read_json_object(request, state.limits.max_text_chars * 4 + 4096)
        options = v1.parse_options({**request.query, **body})
        text = body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise v1.ApiError(400, "bad_text", '"text" must be a non-empty string')
        if len(text) > state.limits.max_text_chars:
            raise v1.ApiError(413, "text_too_long", f"text longer than "
                               f"{state.limits.max_text_chars} characters")
        return v1.TurnRequest(time.monotonic(), options, text=text.strip())
    if ctype not in v1.WAV_TYPES:
        raise v1.ApiError(415, "unsupported_media_type",
                           f"content type {ctype or 'missing'!r}: send audio/wav (a WAV "
                           "body) or application/json ({\"text\": ...})")
    options = v1.parse_options(dict(request.query))
    data = await _read_body(request, state.limits.max_upload_bytes)
    t0 = time.monotonic()  # the whole upload is in: the user's audio has ended
    if not data:
        raise v1.ApiError(400, "empty_body", "empty body: send a WAV")
    try:
        audio = await asyncio.to_thread(decode_wav_bytes, data, "uploaded WAV")
    except AudioFileError as e:
        raise v1.ApiError(400, "bad_audio", str(e)) from None
    if audio.size / 16000 > state.limits.max_utterance_s:
        raise v1.ApiError(413, "utterance_too_long",
                           f"utterance of {audio.size / 16000:.1f} s: the limit is "
                           f"{state.limits.max_utterance_s:g} s")
    return v1.TurnRequest(t0, options, audio=audio)


async def _read_body(request: web.Request, limit: int) -> bytes:
    too_big = UploadError(413, f"upload too large: the limit is {limit} bytes")
    try:
        if request.content_length is not None and request.content_length > limit:
            raise too_big
        return await _read_limited(request.content.read, limit, too_big)
    except UploadError as e:
        raise v1.ApiError(413, "upload_too_large", str(e)) from None


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=str)


# --- the command -----------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser, name: str) -> None:
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default %(default)s; the browser needs "
                   "localhost or https for the microphone)")
    p.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")
    p.add_argument("--max-upload-mb", type=float, default=DEFAULT_MAX_UPLOAD_BYTES / 2**20,
                   help="largest WAV accepted by POST /api/turn and over the WebSocket, "
                   "in MiB (default %(default)g)")
    p.add_argument("--language", default="en", help="ASR language (default %(default)s)")
    p.add_argument("--api-key", default=os.environ.get("VOICE_LLM_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on everything but the page "
                   "and /health (default $VOICE_LLM_API_KEY; unset: no key)")
    p.add_argument("--max-sessions", type=int, default=16,
                   help="open conversations (API sessions + browser tabs) at most "
                   "(default %(default)s)")
    p.add_argument("--slots", type=int, default=None,
                   help="LLM slots to hand out, one per conversation (default: all of the "
                   "server's, from /props total_slots; start it with 'voice-llm up --slots N')")
    p.add_argument("--queue-timeout", type=float, default=DEFAULT_QUEUE_TIMEOUT_S,
                   help="seconds a turn waits for a free slot before an error "
                   "(default %(default)g)")
    p.add_argument("--idle-lease", type=float, default=DEFAULT_IDLE_LEASE_S,
                   help="a conversation idle this long gives its slot to a waiting one "
                   "(default %(default)g s)")
    p.add_argument("--rate-limit", type=int, default=DEFAULT_PER_MINUTE,
                   help="session/turn requests (and page connections) one client may make "
                   "in any 60 s; a client is its API key, or its address without one; over "
                   "it: 429 with Retry-After (default %(default)s; 0: no limit)")
    p.add_argument("--no-speculate", dest="speculate", action="store_false",
                   help="the page's turns start only at the end of an utterance, after its "
                   "fixed 700 ms of silence (default: hands-free, a turn starts at the "
                   "first 200 ms pause and the endpoint policy sets the silence that ends "
                   "it; docs/live.md)")
    p.add_argument("--no-early-asr", dest="early_asr", action="store_false",
                   help="with speculation, Whisper waits for the page's 200 ms pause "
                   "instead of starting at its 100 ms gap: what starting early saves, "
                   "measured (scripts/bench_page.py --gap-share; docs/live.md)")
    add_asr_window_option(p)
    add_engine_options(p)  # --asr / --tts: in-process or a Wyoming speech server


def run(args: argparse.Namespace) -> int:
    from services.server_http import port_in_use

    if not 0 < args.port < 65536:
        raise UserError(f"--port must be 1-65535, not {args.port}")
    if args.max_upload_mb <= 0:
        raise UserError("--max-upload-mb must be > 0")
    if args.max_sessions < 1:
        raise UserError("--max-sessions must be at least 1")
    if args.slots is not None and args.slots < 1:
        raise UserError("--slots must be at least 1")
    if args.rate_limit < 0:
        raise UserError("--rate-limit must be >= 0 (0: no limit)")
    if args.queue_timeout <= 0 or args.idle_lease < 0:
        raise UserError("--queue-timeout must be > 0 and --idle-lease >= 0")
    # Fail before the models load (tens of seconds), not after.
    if port_in_use(args.host, args.port):
        raise UserError(f"{args.host}:{args.port} is already in use (choose --port)")
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from services.assistant import load_assistant

    assistant = await load_assistant(args.llm_url, language=args.language,
                                     asr_window=args.asr_window, asr=args.asr, tts=args.tts)
    slots = args.slots or await server_slots(assistant)
    app = create_app(assistant, max_upload_bytes=int(args.max_upload_mb * 2**20),
                     slots=slots, api_key=args.api_key, max_sessions=args.max_sessions,
                     queue_timeout_s=args.queue_timeout, idle_lease_s=args.idle_lease,
                     rate_limit_per_minute=args.rate_limit, speculate=args.speculate,
                     early_asr=args.early_asr,
                     # a managed server that dies is restarted after the failed turn
                     supervisor=Supervisor(assistant.llm_url))
    app_runner = web.AppRunner(app, access_log=None)
    await app_runner.setup()
    try:
        try:
            await web.TCPSite(app_runner, args.host, args.port).start()
        except OSError as e:
            raise UserError(f"cannot listen on {args.host}:{args.port}: "
                            f"{e.strerror or e}") from None
        host = f"[{args.host}]" if ":" in args.host else args.host
        print(f"voice-llm serve: open http://{host}:{args.port}/ "
              f"(LLM at {assistant.llm_url}, {slots} slot(s), one per conversation; "
              f"{'API key required; ' if args.api_key else ''}Ctrl-C to stop)",
              file=sys.stderr, flush=True)
        if not args.api_key and args.host not in ("127.0.0.1", "localhost", "::1"):
            print("voice-llm serve: warning: listening beyond loopback without --api-key",
                  file=sys.stderr, flush=True)
        await _until_signalled()
        print("voice-llm serve: stopping", file=sys.stderr, flush=True)
    finally:
        await app_runner.cleanup()
        await assistant.close()
    return 0


async def server_slots(assistant: Assistant) -> int:
    """How many slots llama-server has (``total_slots`` in /props; 1 if it does not say)."""
    from pipeline.llm_client import LlmError

    try:
        props = await assistant.llm.get_json("/props")
    except LlmError:
        return 1
    total = props.get("total_slots") if isinstance(props, dict) else None
    return total if isinstance(total, int) and total >= 1 else 1


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)

"""``voice-llm serve``: the assistant as an aiohttp service with a browser page.

Routes::

    GET  /           the page (services/static/index.html + app.js + style.css)
    GET  /health     {"status": "ok", "sessions": N}
    GET  /ws         one WebSocket per browser tab = one conversation (services.web_session)
    POST /api/turn   a WAV (raw body or multipart field) -> {transcript, reply, metrics}
    POST /api/reset  forget the /api/turn conversation

Uploads larger than ``max_upload_bytes`` get 413 and a broken WAV 400, each with a one-line
JSON ``{"error": ...}``; the conversation is untouched by either.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import BodyPartReader, web

from pipeline.audio_in import AudioFileError
from pipeline.audio_out import InstantSink
from pipeline.conversation import Conversation
from services.errors import UserError
from services.turn_options import add_asr_window_option
from services.web_session import BrowserSession, Limits, decode_wav_bytes

if TYPE_CHECKING:
    from pipeline.turn import TurnRunner
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


@dataclass
class AppState:
    assistant: Assistant
    limits: Limits
    api: ApiConversation
    sessions: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    sockets: dict[str, web.WebSocketResponse] = field(default_factory=dict)
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))


STATE = web.AppKey("voice_llm_state", AppState)


def create_app(assistant: Assistant, *, max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
               max_utterance_s: float = 60.0) -> web.Application:
    limits = Limits(max_upload_bytes=max_upload_bytes, max_utterance_s=max_utterance_s)
    sink = InstantSink()
    api = ApiConversation(assistant.runner(sink, Conversation()), sink)
    # The body limit is enforced by read_upload (with a JSON 413); this one only has to
    # let multipart framing through.
    app = web.Application(client_max_size=max_upload_bytes + 64 * 1024)
    app[STATE] = AppState(assistant, limits, api)
    app.router.add_get("/", index)
    app.router.add_get("/health", health)
    app.router.add_get("/ws", websocket)
    app.router.add_post("/api/turn", api_turn)
    app.router.add_post("/api/reset", api_reset)
    app.router.add_static("/static", STATIC_DIR, append_version=True)
    app.on_shutdown.append(close_sessions)
    return app


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html",
                            headers={"Cache-Control": "no-cache"})


async def health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return web.json_response({"status": "ok", "sessions": len(state.sessions),
                              "llm_url": state.assistant.llm_url})


# --- WebSocket sessions ----------------------------------------------------------------
async def websocket(request: web.Request) -> web.WebSocketResponse:
    state = request.app[STATE]
    # Heartbeat: a laptop that sleeps mid-turn is noticed and its turn hung up.
    # Messages up to twice the upload limit get a one-line error from the session; only
    # beyond that does aiohttp close the socket (1009, message too big).
    ws = web.WebSocketResponse(heartbeat=20.0,
                               max_msg_size=2 * state.limits.max_upload_bytes + 1024)
    await ws.prepare(request)
    session_id = f"s{next(state.ids)}"
    session = BrowserSession(session_id, state.assistant, ws, state.limits)
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


async def close_sessions(app: web.Application) -> None:
    from aiohttp import WSCloseCode

    state = app[STATE]
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
    api = state.api
    async with api.lock:
        before = api.sink.samples
        result = await api.runner.run(audio, t0=t0, mode=mode)
        audio_s = (api.sink.samples - before) / state.assistant.tts.sample_rate
    body = {"transcript": result.transcript, "reply": result.reply,
            "error": result.error, "audio_s": round(audio_s, 3),
            "metrics": result.metrics.to_dict()}
    # No transcript: the user's audio held nothing usable; otherwise a backend stage failed.
    status = 200 if result.error is None else (422 if not result.transcript else 502)
    return web.json_response(body, status=status)


async def api_reset(request: web.Request) -> web.Response:
    api = request.app[STATE].api
    async with api.lock:
        api.runner.conversation = Conversation()
    return web.json_response({"status": "ok"})


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
    add_asr_window_option(p)


def run(args: argparse.Namespace) -> int:
    from services.server_http import port_in_use

    if not 0 < args.port < 65536:
        raise UserError(f"--port must be 1-65535, not {args.port}")
    if args.max_upload_mb <= 0:
        raise UserError("--max-upload-mb must be > 0")
    # Fail before the models load (tens of seconds), not after.
    if port_in_use(args.host, args.port):
        raise UserError(f"{args.host}:{args.port} is already in use (choose --port)")
    return asyncio.run(_serve(args))


async def _serve(args: argparse.Namespace) -> int:
    from services.assistant import load_assistant

    assistant = await load_assistant(args.llm_url, language=args.language,
                                     asr_window=args.asr_window)
    app = create_app(assistant, max_upload_bytes=int(args.max_upload_mb * 2**20))
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
              f"(LLM at {assistant.llm_url}; Ctrl-C to stop)", file=sys.stderr, flush=True)
        await _until_signalled()
        print("voice-llm serve: stopping", file=sys.stderr, flush=True)
    finally:
        await app_runner.cleanup()
        await assistant.close()
    return 0


async def _until_signalled() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)

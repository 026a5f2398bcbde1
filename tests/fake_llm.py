"""A scriptable fake llama-server for unit tests (aiohttp's test server, real sockets).

It speaks the parts of llama-server's HTTP API the pipeline uses and covers what the real
server rarely does on demand: keep-alive pings, events split across reads, ``\\r\\n`` line
ends, slow streams, in-stream errors, abrupt disconnects, stalls, HTTP errors.

    from fake_llm import FakeLlm, Reply

    async with FakeLlm(Reply(tokens=["Hi", " there", "."], token_delay=0.02)) as fake:
        async with LlmClient(fake.url) as client: ...
        fake.requests[-1].body          # the JSON the client POSTed
        fake.streams[-1].tokens_sent    # what the server got out before the end
        await fake.wait_disconnect()    # the client hung up mid-stream (barge-in tests)

Endpoints: ``POST /v1/chat/completions`` (streamed, like llama-server: role-only chunk,
one chunk per token, a final chunk with ``finish_reason`` + ``timings`` + ``usage``, then
``data: [DONE]``), ``GET /health``, ``GET /props``, ``GET /slots`` (one slot whose
``is_processing`` is true while a stream is being served).

``FakeLlm(reply)`` takes one ``Reply`` (used for every request), a list of them (used in
order, the last one repeats) or a function ``body -> Reply``; ``fake.reply`` may be
reassigned between requests. ``Reply(raw=[...])`` scripts the body byte for byte.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from aiohttp.test_utils import TestServer

MODEL = "fake-smollm2"

# A script step: bytes are written, a float is a sleep (seconds), "disconnect" aborts the
# TCP connection without finishing the HTTP body, "stall" keeps the connection open and
# sends nothing more (until the client goes away).
Step = bytes | float | Literal["disconnect", "stall"]


@dataclass
class Reply:
    """One scripted answer to ``POST /v1/chat/completions``."""

    tokens: Sequence[str] = ("Hello", "!", " How", " can", " I", " help", "?")
    token_delay: float = 0.0  # seconds before each content chunk (decode speed)
    first_delay: float = 0.0  # seconds before the headers
    # Seconds after the headers, before the role chunk. The real server answers 200 at once
    # and sends the role chunk together with the first token after prefill: use this to
    # mimic prefill, and ``first_delay`` for a server that is slow to answer at all.
    prefill_delay: float = 0.0
    role_chunk: bool = True  # llama-server's role-only first chunk (content: null)
    pings: int = 0  # ":" keep-alive comment events before each content chunk
    finish_reason: str | None = "stop"  # None: no finish chunk at all
    timings: dict[str, Any] | None = None  # None: plausible timings derived from tokens
    usage: dict[str, Any] | None = None  # None: derived from tokens; {} omits the field
    usage_chunk: bool = False  # usage+timings in a separate choices-less chunk (include_usage)
    done: bool = True  # send "data: [DONE]"
    error_after: int | None = None  # send data: {"error": ...} after N tokens, then end
    error_message: str = "fake in-stream failure"
    disconnect_after: int | None = None  # abort the connection after N tokens
    stall_after: int | None = None  # go silent (connection open) after N tokens
    status: int = 200  # >= 400: answer with error_body before any streaming
    error_body: dict[str, Any] | str | None = None  # None: llama-server-like JSON; str: text
    content_type: str = "text/event-stream"
    newline: str = "\n"  # "\r\n" or "\r" exercise the client's line handling
    write_size: int | None = None  # split every write into pieces of this many bytes
    piece_delay: float = 0.0  # sleep between those pieces (forces separate reads)
    raw: Sequence[Step] | None = None  # the whole body, scripted; overrides the above

    def steps(self) -> list[Step]:
        """The body as a list of steps (what the server will do, in order)."""
        if self.raw is not None:
            return list(self.raw)
        steps: list[Step] = [self.prefill_delay] if self.prefill_delay else []
        if self.role_chunk:
            steps.append(self._event(_chunk({"role": "assistant", "content": None})))
        for index, token in enumerate(self.tokens):
            if (stop := self._stop_at(index)) is not None:
                return steps + stop
            if self.token_delay:
                steps.append(self.token_delay)
            steps.extend([self._ping()] * self.pings)
            steps.append(self._event(_chunk({"content": token})))
        if (stop := self._stop_at(len(self.tokens))) is not None:
            return steps + stop
        return steps + self._ending()

    def _stop_at(self, index: int) -> list[Step] | None:
        if self.error_after == index:
            error = {"code": 500, "message": self.error_message, "type": "server_error"}
            return [self._event({"error": error})]
        if self.disconnect_after == index:
            return ["disconnect"]
        if self.stall_after == index:
            return ["stall"]
        return None

    def _ending(self) -> list[Step]:
        steps: list[Step] = []
        extra = {"timings": self.final_timings()}
        if self.final_usage():
            extra["usage"] = self.final_usage()
        if self.finish_reason is not None:
            finish = _chunk({}, self.finish_reason)
            steps.append(self._event(finish if self.usage_chunk else {**finish, **extra}))
        if self.usage_chunk:
            steps.append(self._event({**_chunk({}), "choices": [], **extra}))
        if self.done:
            steps.append(self._line("data: [DONE]") + self._line(""))
        return steps

    def final_timings(self) -> dict[str, Any]:
        if self.timings is not None:
            return self.timings
        n = len(self.tokens)
        predicted_ms = max(self.token_delay * n * 1000, 0.1)
        return {"cache_n": 0, "prompt_n": 12, "prompt_ms": max(self.first_delay * 1000, 0.1),
                "prompt_per_token_ms": 1.0, "prompt_per_second": 1000.0,
                "predicted_n": n, "predicted_ms": predicted_ms,
                "predicted_per_token_ms": predicted_ms / max(n, 1),
                "predicted_per_second": n / predicted_ms * 1000}

    def final_usage(self) -> dict[str, Any]:
        if self.usage is not None:
            return self.usage
        n = len(self.tokens)
        return {"completion_tokens": n, "prompt_tokens": 12, "total_tokens": n + 12}

    def error_response(self) -> web.Response:
        if isinstance(self.error_body, str):
            return web.Response(status=self.status, text=self.error_body)
        return web.json_response(self.error_json(), status=self.status)

    def error_json(self) -> dict[str, Any]:
        if isinstance(self.error_body, dict):
            return self.error_body
        kinds = {400: ("the request exceeds the available context size, try increasing it",
                       "exceed_context_size_error"),
                 401: ("Invalid API Key", "authentication_error"),
                 503: ("Loading model", "unavailable_error")}
        message, kind = kinds.get(self.status, ("fake server error", "server_error"))
        return {"error": {"code": self.status, "message": message, "type": kind}}

    def _event(self, data: dict[str, Any]) -> bytes:
        return self._line("data: " + json.dumps(data, separators=(",", ":"))) + self._line("")

    def _ping(self) -> bytes:
        return self._line(":") + self._line("")

    def _line(self, text: str) -> bytes:
        return (text + self.newline).encode()


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    return {"choices": [{"finish_reason": finish_reason, "index": 0, "delta": delta}],
            "created": int(time.time()), "id": "chatcmpl-fake", "model": MODEL,
            "system_fingerprint": "fake", "object": "chat.completion.chunk"}


def _is_token(step: bytes) -> bool:
    """A content chunk (the role chunk has "content":null, the finish chunk no content)."""
    return step.startswith(b"data: {") and b'"content":"' in step


@dataclass
class ReceivedRequest:
    body: Any  # decoded JSON (or the raw text when it is not JSON)
    headers: dict[str, str]
    t: float  # time.monotonic() when the handler saw it
    peer: Any = None  # the client's (host, port): a new port means a new TCP connection


@dataclass
class StreamRecord:
    """What happened to one streamed response, seen from the server."""

    started_at: float  # request received (the slot is "processing" from here)
    tokens_sent: int = 0  # content chunks written
    ended_at: float | None = None
    # "complete", "error" (in-stream), "http_error", "disconnect" (server hung up),
    # "stall" (released by close()), "client_gone" (the client hung up first)
    outcome: str = "streaming"
    client_gone_at: float | None = None  # the client closed the connection before the end


ReplySource = Reply | Sequence[Reply] | Callable[[Any], Reply]


class FakeLlm:
    """The fake server. ``async with FakeLlm(...) as fake`` or ``await start()``/``close()``."""

    def __init__(self, reply: ReplySource | None = None) -> None:
        self.reply: ReplySource = Reply() if reply is None else reply
        self.requests: list[ReceivedRequest] = []
        self.streams: list[StreamRecord] = []
        self._served = itertools.count()
        self._gone = asyncio.Event()
        self._received = asyncio.Event()
        self._closing = asyncio.Event()
        self._server: TestServer | None = None

    async def __aenter__(self) -> FakeLlm:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        app.router.add_get("/props", self._props)
        app.router.add_get("/slots", self._slots)
        # TestServer runs with handler_cancellation=True: a handler is cancelled the moment
        # its client disconnects, which is how the fake *observes* a hang-up.
        self._server = TestServer(app, host="127.0.0.1")
        await self._server.start_server()

    async def close(self) -> None:
        self._closing.set()  # releases stalled handlers so shutdown does not wait on them
        if self._server is not None:
            await self._server.close()
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None, "FakeLlm not started"
        return str(self._server.make_url("")).rstrip("/")

    @property
    def is_processing(self) -> bool:
        return any(s.ended_at is None for s in self.streams)

    async def wait_disconnect(self, limit_s: float = 5.0) -> StreamRecord:
        """Wait until a client hangs up on a stream; return that stream's record."""
        await asyncio.wait_for(self._gone.wait(), limit_s)
        return next(s for s in reversed(self.streams) if s.client_gone_at is not None)

    async def wait_request(self, limit_s: float = 5.0) -> ReceivedRequest:
        """Wait until at least one chat request has arrived; return the latest."""
        await asyncio.wait_for(self._received.wait(), limit_s)
        return self.requests[-1]

    async def wait_idle(self, limit_s: float = 5.0) -> None:
        """Wait until no stream is being served (like polling /slots until idle)."""
        deadline = time.monotonic() + limit_s
        while self.is_processing:
            if time.monotonic() > deadline:
                raise TimeoutError("fake llama-server still streaming")
            await asyncio.sleep(0.002)

    def next_reply(self, body: Any) -> Reply:
        index = next(self._served)
        if isinstance(self.reply, Reply):
            return self.reply
        if callable(self.reply):
            return self.reply(body)
        return self.reply[min(index, len(self.reply) - 1)]

    # --- handlers ----------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        text = await request.text()
        try:
            body: Any = json.loads(text)
        except ValueError:
            body = text
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.requests.append(ReceivedRequest(body, dict(request.headers), time.monotonic(),
                                             peer))
        self._received.set()
        reply = self.next_reply(body)
        record = StreamRecord(started_at=time.monotonic())
        self.streams.append(record)
        try:
            if reply.first_delay:
                await asyncio.sleep(reply.first_delay)
            if reply.status >= 400:
                record.outcome = "http_error"
                return reply.error_response()
            response = web.StreamResponse(headers={"Content-Type": reply.content_type})
            await response.prepare(request)
            record.outcome = await self._play(request, response, reply, record)
        except (asyncio.CancelledError, ConnectionError):
            record.outcome = "client_gone"
            record.client_gone_at = time.monotonic()
            self._gone.set()
            raise
        finally:
            record.ended_at = time.monotonic()
        return response

    async def _play(self, request: web.Request, response: web.StreamResponse, reply: Reply,
                    record: StreamRecord) -> str:
        for step in reply.steps():
            if isinstance(step, float | int):
                await asyncio.sleep(step)
            elif step == "disconnect":
                assert request.transport is not None
                request.transport.abort()  # no chunked terminator: a dying server
                return "disconnect"
            elif step == "stall":
                await self._closing.wait()  # until the client gives up (handler cancelled)
                return "stall"
            else:
                await self._write(response, step, reply)
                record.tokens_sent += _is_token(step)
        await response.write_eof()
        ended_with_error = reply.error_after is not None and reply.raw is None
        return "error" if ended_with_error else "complete"

    @staticmethod
    async def _write(response: web.StreamResponse, data: bytes, reply: Reply) -> None:
        size = reply.write_size or len(data)
        for offset in range(0, len(data), size):
            if offset and reply.piece_delay:
                await asyncio.sleep(reply.piece_delay)
            await response.write(data[offset:offset + size])

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _props(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": f"/fake/{MODEL}.gguf", "total_slots": 1,
                                  "default_generation_settings": {"n_ctx": 4096},
                                  "build_info": "fake"})

    async def _slots(self, request: web.Request) -> web.Response:
        busy = self.is_processing
        return web.json_response([{"id": 0, "id_task": len(self.streams) - 1 if busy else -1,
                                   "n_ctx": 4096, "is_processing": busy}])


__all__ = ["FakeLlm", "Reply", "ReceivedRequest", "StreamRecord", "Step"]

"""Streaming client for ``/v1/chat/completions``: llama-server, or any OpenAI-compatible server.

One request is one ``ChatStream``: an async context manager and an async iterator of typed,
monotonic-timestamped events::

    async with client.stream_chat(messages, ChatOptions(max_tokens=64)) as stream:
        async for ev in stream:          # ResponseStarted, RoleChunk, TokenDelta..., Finished
            ...
    stream.closed_at                      # when the TCP connection was closed

Before its first request the client asks the server once what it offers beyond the OpenAI
stream (``capabilities()``, ``pipeline.llm_caps``): llama-server's ``/props``, ``/slots``,
``/health``, ``timings``. Elsewhere the llama-only request fields are not sent, the
``model`` is named, and ``wait_slot_idle`` raises ``LlmUnsupported`` (docs/llm-servers.md).

The POST is sent when iteration starts, so everything that can fail or be cancelled happens
inside the ``async with`` body. Leaving the block by any path -- normal end, ``break``, an
exception, cancellation of the consuming task -- closes the TCP connection at once. That
close is what makes llama-server cancel the generation ("cancel task" in its log); a socket
that is merely not read lets the server generate to the end and hold the CPU.

Errors (``str(e)`` is one line saying what went wrong and what to do)::

    LlmError
    ├── LlmUnreachable   nothing answers at the URL: connection refused, DNS, connect timeout
    ├── LlmHttpError     4xx/5xx before the stream started (.status, .body, server message)
    ├── LlmStreamError   {"error": ...} in the stream, malformed chunk, connection lost or
    │                    stream ended before [DONE] / finish_reason
    ├── LlmTimeout       no bytes from the server for ``read_timeout`` seconds
    └── LlmUnsupported   the server does not offer what was asked (``/slots``)
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp

from pipeline.llm_caps import NOT_VERIFIABLE, Answer, LlmCapabilities
from pipeline.sse import SseParser

log = logging.getLogger(__name__)

CHAT_PATH = "/v1/chat/completions"
_HINT_UP = "start one with 'voice-llm up'"


# --- events ----------------------------------------------------------------------------

@dataclass(frozen=True)
class ResponseStarted:
    """Response headers received (llama-server sends them with the first chunk)."""

    t: float
    status: int


@dataclass(frozen=True)
class RoleChunk:
    """The role-only first chunk (``delta.role``, ``content: null``). Not a token: counting it
    would make TTFT look shorter than it is."""

    t: float


@dataclass(frozen=True)
class TokenDelta:
    """A non-empty ``delta.content``; the first one marks TTFT."""

    t: float
    text: str


@dataclass(frozen=True)
class Finished:
    """The stream ended normally. ``t`` is when the chunk carrying ``finish_reason`` arrived;
    ``timings``/``usage`` are the server's (empty dicts when it sent none)."""

    t: float
    finish_reason: str | None
    timings: dict[str, Any]
    usage: dict[str, Any]


StreamEvent = ResponseStarted | RoleChunk | TokenDelta | Finished


# --- errors ----------------------------------------------------------------------------

class LlmError(Exception):
    """Base of all client errors; ``str(e)`` is one line for the user."""


class LlmUnreachable(LlmError):
    """Nothing answers at the URL."""


class LlmHttpError(LlmError):
    """An HTTP error status before streaming started."""

    def __init__(self, message: str, *, status: int, body: str) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class LlmStreamError(LlmError):
    """The stream broke after it started."""


class LlmTimeout(LlmError):
    """The server went silent for longer than the read timeout."""


class LlmUnsupported(LlmError):
    """The server does not offer an extra the caller asked for (``/slots``)."""


# --- request options -------------------------------------------------------------------

@dataclass
class ChatOptions:
    max_tokens: int | None = None
    cache_prompt: bool = True  # reuse the slot's KV for the common prefix (llama-server)
    temperature: float | None = None
    seed: int | None = None
    id_slot: int | None = None
    # llama-server's repetition penalty over the last N tokens of prompt and reply
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None
    # OpenAI's way to get token counts from a stream: a last chunk with ``usage``.
    include_usage: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # passed through as-is

    def request_body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The body for llama-server; ``LlmCapabilities.request_body`` trims it for
        servers without its extras."""
        body: dict[str, Any] = {"messages": messages, "cache_prompt": self.cache_prompt}
        optional = {"max_tokens": self.max_tokens, "temperature": self.temperature,
                    "seed": self.seed, "id_slot": self.id_slot,
                    "repeat_penalty": self.repeat_penalty,
                    # the window means nothing without a penalty to apply in it
                    "repeat_last_n": self.repeat_last_n if self.repeat_penalty else None}
        body.update({k: v for k, v in optional.items() if v is not None})
        if self.include_usage:
            body["stream_options"] = {"include_usage": True}
        body.update(self.extra)
        body["stream"] = True  # this client only reads event streams
        return body


# --- the client ------------------------------------------------------------------------

class LlmClient:
    """An aiohttp session bound to one llama-server. Use as ``async with`` or call
    ``close()``; the session is created lazily inside the running loop."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", *,
                 connect_timeout: float = 5.0, read_timeout: float = 30.0,
                 api_key: str | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._api_key = api_key
        self._session: aiohttp.ClientSession | None = None
        self._caps: LlmCapabilities | None = None
        self._caps_task: asyncio.Task[LlmCapabilities | None] | None = None

    async def __aenter__(self) -> LlmClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if self._caps_task is not None and not self._caps_task.done():
            self._caps_task.cancel()
            await asyncio.wait({self._caps_task})
        if self._session is not None:
            await self._session.close()
            self._session = None

    def stream_chat(self, messages: list[dict[str, str]],
                    options: ChatOptions | None = None) -> ChatStream:
        """A stream for one chat request; nothing is sent until iteration starts."""
        return ChatStream(self, (options or ChatOptions()).request_body(messages))

    async def get_json(self, path: str) -> Any:
        """GET ``path`` (``/health``, ``/props``, ``/slots``) and decode its JSON."""
        session = self._ensure_session()
        try:
            async with session.get(self.base_url + path) as response:
                text = await response.text(errors="replace")
                if response.status >= 400:
                    raise _http_error(path, response.status, text)
        except aiohttp.ClientError as exc:
            raise self._request_error(exc, path) from exc
        try:
            return json.loads(text)
        except ValueError as exc:
            raise LlmError(f"llama-server at {self.base_url} answered {path} with "
                           f"non-JSON: {_one_line(text)[:120]!r}") from exc

    @property
    def caps(self) -> LlmCapabilities | None:
        """What the server offers, once detected (None before the first request)."""
        return self._caps

    def prefetch_capabilities(self) -> None:
        """Start the detection now (a turn does it while ASR runs), without waiting."""
        if self._caps is None and (self._caps_task is None or self._caps_task.done()):
            self._caps_task = asyncio.create_task(self._detect(), name="llm-capabilities")

    async def capabilities(self) -> LlmCapabilities | None:
        """What the server offers, detected once (four GETs at once). None, and asked again
        next time, when nothing answered at all: the request itself then says why."""
        if self._caps is not None:
            return self._caps
        self.prefetch_capabilities()
        assert self._caps_task is not None
        return await asyncio.shield(self._caps_task)

    async def _detect(self) -> LlmCapabilities | None:
        paths = ("/health", "/props", "/slots", "/v1/models")
        health, props, slots, models = await asyncio.gather(*(self._probe(p) for p in paths))
        if health is props is slots is models is None:
            return None
        if self._caps is None:
            self._caps = LlmCapabilities.from_answers(health=health, props=props,
                                                      slots=slots, models=models)
            log.info("LLM server at %s: %s", self.base_url, self._caps.to_dict())
        return self._caps

    async def _probe(self, path: str) -> Answer:
        """(status, JSON or None) of a GET; None when nothing answered (no exception)."""
        session = self._ensure_session()
        try:
            async with session.get(self.base_url + path,
                                   timeout=aiohttp.ClientTimeout(total=5.0)) as response:
                text = await response.text(errors="replace")
                status = response.status
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        try:
            return status, json.loads(text)
        except ValueError:
            return status, None

    async def wait_slot_idle(self, limit_s: float, *, slot: int | None = None,
                             interval: float = 0.005) -> float | None:
        """Poll ``/slots`` until ``slot`` (None: every slot) is not processing; the monotonic
        time it was first seen idle, or None after ``limit_s``. The proof that a hang-up
        stopped the server (barge-in, an abandoned speculation, the lab). A poll costs a
        few ms on localhost; a transport failure raises ``LlmError``, a server without
        ``/slots`` (detected) ``LlmUnsupported``."""
        if self._caps is not None and not self._caps.slots:
            raise LlmUnsupported(f"the LLM server at {self.base_url} has no /slots: "
                                 f"{NOT_VERIFIABLE}")
        deadline = time.monotonic() + limit_s
        while True:
            slots = await self.get_json("/slots")
            now = time.monotonic()
            mine = [s for s in slots if isinstance(s, dict)
                    and (slot is None or s.get("id") == slot)] if isinstance(slots, list) else []
            if not any(s.get("is_processing") for s in mine):
                return now
            if now > deadline:
                return None
            await asyncio.sleep(interval)

    # The pieces below are used by ChatStream.

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # force_close: no keep-alive pool. A stream's connection must never be handed
            # back for reuse (closing it is the cancel signal), and a pooled idle socket the
            # server has timed out would make the next POST fail spuriously.
            connector = aiohttp.TCPConnector(force_close=True)
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout,
                                            sock_read=self.read_timeout)
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._session = aiohttp.ClientSession(connector=connector, timeout=timeout,
                                                  headers=headers)
        return self._session

    async def _post_chat(self, body: dict[str, Any]) -> aiohttp.ClientResponse:
        """Send the chat request; return the response once a 2xx status arrived."""
        session = self._ensure_session()
        try:
            response = await session.post(self.base_url + CHAT_PATH, json=body,
                                          headers={"Accept": "text/event-stream"})
            if response.status < 400:
                return response
            try:
                text = await response.text(errors="replace")
            finally:
                response.close()
        except aiohttp.ClientError as exc:
            raise self._request_error(exc, CHAT_PATH) from exc
        raise _http_error(CHAT_PATH, response.status, text)

    def _request_error(self, exc: aiohttp.ClientError, path: str) -> LlmError:
        """Translate an aiohttp failure before/while reading a response."""
        if isinstance(exc, aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
            return LlmUnreachable(f"{self.base_url!r} is not a usable llama-server URL "
                                  f"(expected http://HOST:PORT)")
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return LlmUnreachable(f"no answer from {self.base_url} within "
                                  f"{self.connect_timeout:g} s (is llama-server running? "
                                  f"{_HINT_UP})")
        if isinstance(exc, aiohttp.ClientConnectorError):
            return LlmUnreachable(f"no llama-server at {self.base_url} ({_HINT_UP})")
        if isinstance(exc, aiohttp.ServerTimeoutError):
            return self._timeout_error(path)
        return LlmStreamError(f"connection to llama-server at {self.base_url} failed on "
                              f"{path} ({_describe(exc)}); check the server log")

    def _timeout_error(self, path: str) -> LlmTimeout:
        return LlmTimeout(f"llama-server at {self.base_url} sent nothing for "
                          f"{self.read_timeout:g} s on {path} (stuck or overloaded? check "
                          f"its log, or raise read_timeout)")


class ChatStream:
    """One streamed chat request. See the module docstring for the life cycle."""

    def __init__(self, client: LlmClient, body: dict[str, Any]) -> None:
        self.body = body
        self.request_at: float = time.monotonic()  # reset just before the POST is sent
        self.closed_at: float | None = None
        self.finished: Finished | None = None
        self.text = ""  # raw generated text, token for token (history must keep it raw)
        # Optional tap on every raw SSE data payload, (arrival monotonic time, payload);
        # for tools that show the wire format (scripts/sse.py). Set before iterating.
        self.on_payload: Callable[[float, str], None] | None = None
        self._client = client
        self._parser = SseParser()
        self._pending: deque[StreamEvent] = deque()
        self._request: asyncio.Task[aiohttp.ClientResponse] | None = None
        self._response: aiohttp.ClientResponse | None = None
        self._error: LlmError | None = None
        self._done = False  # no more events will come (ended, failed or closed)
        self._closing = False  # aclose() was called: connection errors are expected
        self._role_seen = False
        self._finish_reason: str | None = None
        self._finish_t: float | None = None
        self._timings: dict[str, Any] = {}
        self._usage: dict[str, Any] = {}
        self._timings_seen = False  # any chunk carried timings (capability detection)

    async def __aenter__(self) -> ChatStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()

    @property
    def last_timings(self) -> dict[str, Any]:
        """The latest server ``timings`` seen (every chunk carries them when the request
        sets ``timings_per_token``), so a stream closed early still knows prompt_n/cache_n."""
        return dict(self._timings)

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> StreamEvent:
        while not self._pending:
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            if self._done:
                raise StopAsyncIteration
            await self._advance()
        return self._pending.popleft()

    async def aclose(self) -> None:
        """Close the connection now (barge-in). Idempotent; safe from another task, in which
        case the consumer's iteration simply ends."""
        if self.closed_at is not None:
            return
        self._closing = True
        self._done = True
        request = self._request
        try:
            if request is not None and not request.done():
                request.cancel()  # aiohttp closes the half-open connection itself
                await asyncio.wait({request})
        finally:
            # Even if this wait is cancelled in turn, the socket must not outlive us.
            if request is not None and request.done() and not request.cancelled():
                request.exception()  # retrieved: the consumer reports errors, not asyncio
            self._close_connection()

    # --- reading ---------------------------------------------------------------------

    async def _advance(self) -> None:
        """Produce the next events (or end / fail the stream)."""
        try:
            if self._response is None:
                await self._start()
            else:
                self._consume(await self._read())
        except LlmError:
            self._done = True
            self._close_connection()
            raise

    async def _start(self) -> None:
        caps = await self._client.capabilities()
        if self._closing:
            return  # aclose() ran while the server was being asked
        if caps is not None:
            self.body = caps.request_body(self.body)
        self.request_at = time.monotonic()
        # The POST runs as its own task so that aclose() from another task can cancel it
        # while the consumer waits for the headers (a barge-in during prefill).
        self._request = asyncio.create_task(self._post(), name="llm-post")
        try:
            response = await self._request
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._closing and task is not None and not task.cancelling():
                return  # aclose() from another task cancelled the POST: just end
            raise
        now = time.monotonic()
        if self._closing:
            return  # aclose() ran while the headers were arriving; it closed the response
        log.debug("llm response %s after %.1f ms", response.status,
                  (now - self.request_at) * 1000)
        if response.content_type != "text/event-stream":
            raise LlmStreamError(f"llama-server at {self._client.base_url} answered "
                                 f"{response.content_type!r}, not an event stream; is it "
                                 f"really llama-server?")
        self._pending.append(ResponseStarted(now, response.status))

    async def _post(self) -> aiohttp.ClientResponse:
        response = await self._client._post_chat(self.body)
        # Stored before returning (no await in between): even if this task is cancelled on
        # its way out, aclose() still finds the response and closes its socket.
        self._response = response
        return response

    async def _read(self) -> bytes:
        assert self._response is not None
        try:
            return await self._response.content.readany()
        except aiohttp.ServerTimeoutError as exc:
            raise self._client._timeout_error(CHAT_PATH) from exc
        except aiohttp.ClientError as exc:
            if self._closing:
                return b""  # our own aclose() from another task
            raise LlmStreamError(f"connection to llama-server at {self._client.base_url} "
                                 f"was lost mid-stream ({_describe(exc)}); the reply is "
                                 f"incomplete, check the server log") from exc

    def _consume(self, data: bytes) -> None:
        if self._closing:
            return
        if not data:
            self._end_of_body()
            return
        now = time.monotonic()
        for payload in self._parser.feed(data):
            if self.on_payload is not None:
                self.on_payload(now, payload)
            try:
                self._handle(payload, now)
            except LlmStreamError as exc:
                # Events already queued from this read are delivered before the error.
                self._error = exc
                self._done = True
                self._close_connection()
                return
            if self._done:
                return  # [DONE]: anything after it is not ours

    def _handle(self, payload: str, t: float) -> None:
        if payload == "[DONE]":
            self._finish(t)
            return
        chunk = _decode_chunk(payload)
        if "error" in chunk:
            raise LlmStreamError("llama-server reported an error mid-stream: "
                                 f"{_error_message(chunk['error'])}")
        if isinstance(chunk.get("timings"), dict):
            self._timings = chunk["timings"]
            self._timings_seen = True
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            self._handle_choice(choices[0], t)

    def _handle_choice(self, choice: dict[str, Any], t: float) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if "role" in delta and not self._role_seen:
                self._role_seen = True
                self._pending.append(RoleChunk(t))
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text += content
                self._pending.append(TokenDelta(t, content))
        reason = choice.get("finish_reason")
        if reason is not None:
            self._finish_reason = str(reason)
            self._finish_t = t

    def _finish(self, t: float) -> None:
        t_finish = self._finish_t if self._finish_t is not None else t
        self.finished = Finished(t_finish, self._finish_reason, self._timings, self._usage)
        self._pending.append(self.finished)
        self._done = True
        self._close_connection()  # the server is done; release the socket now
        log.debug("llm finished: %s, %d chars", self._finish_reason, len(self.text))

    def _end_of_body(self) -> None:
        if self._finish_t is not None:
            # finish_reason seen but no [DONE]: the reply is complete, accept it.
            self._finish(self._finish_t)
            return
        raise LlmStreamError(f"llama-server at {self._client.base_url} ended the stream "
                             f"before finishing (no finish_reason, no [DONE]); the reply is "
                             f"incomplete, check the server log")

    def _close_connection(self) -> None:
        if self.closed_at is not None:
            return
        if self._response is not None:
            # close(), not release(): the socket must die so the server cancels the task.
            self._response.close()
        self.closed_at = time.monotonic()
        self._observe()

    def _observe(self) -> None:
        """Tell the client's capabilities what this stream showed, when it is conclusive:
        timings seen, or a complete reply without them; usage on a complete reply that
        asked for it."""
        caps = self._client.caps
        if caps is None or (caps.timings is not None and caps.usage is not None):
            return
        complete = self.finished is not None
        asked = (self.body.get("stream_options") or {}).get("include_usage") is True
        if self._timings_seen or complete:
            caps.observe(timings_seen=self._timings_seen,
                         usage_seen=bool(self._usage) if complete and asked else None)


# --- helpers ---------------------------------------------------------------------------

def _decode_chunk(payload: str) -> dict[str, Any]:
    try:
        chunk = json.loads(payload)
    except ValueError:
        chunk = None
    if not isinstance(chunk, dict):
        raise LlmStreamError(f"llama-server sent a malformed stream chunk: "
                             f"{_one_line(payload)[:120]!r}")
    return chunk


# What to do about the statuses llama-server is known to answer (docs/llama-server.md).
_STATUS_HINTS = {
    401: "give the client the server's --api-key",
    404: "is this URL really a llama-server?",
    503: "the model is still loading; wait until /health answers 200",
}


def _http_error(path: str, status: int, body: str) -> LlmHttpError:
    message = _server_message(body) or _one_line(body)[:200] or "no details"
    hint = _STATUS_HINTS.get(status)
    return LlmHttpError(f"llama-server answered HTTP {status} on {path}: {message}"
                        + (f" ({hint})" if hint else ""), status=status, body=body)


def _server_message(body: str) -> str | None:
    """The message of llama-server's ``{"error": {"message", "type"}}`` body, if any."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if isinstance(data, dict) and "error" in data:
        return _error_message(data["error"])
    return None


def _error_message(error: Any) -> str:
    if isinstance(error, dict):
        message = _one_line(str(error.get("message", "")))
        kind = error.get("type")
        return f"{message} ({kind})" if kind else message or _one_line(json.dumps(error))
    return _one_line(str(error))


def _describe(exc: BaseException) -> str:
    """The one place a transport failure is put into words for the user. aiohttp's own
    text ("ClientPayloadError: Response payload is not completed: <TransferEncodingError:
    400, ...>") says nothing a user can act on, so it goes to the log only."""
    text = _one_line(str(exc))
    log.info("llama-server transport error: %s",
             f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "the server closed the connection before the reply was complete"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection"
    if isinstance(exc, aiohttp.ClientOSError):
        return "the connection was reset"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"a malformed HTTP response (status {exc.status})"
    return "the connection failed"


def _one_line(text: str) -> str:
    return " ".join(text.split())

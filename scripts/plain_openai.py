#!/usr/bin/env python3
"""A plain OpenAI-shaped LLM server for testing: llama-server with its extras hidden.

It is NOT another engine (none can be installed offline here): it forwards to a real
llama-server and shows only what any OpenAI-compatible server (vLLM, Ollama, a hosted API)
is sure to have, so voice-llm can be tested and measured without llama-server's extras:

- ``GET /v1/models``: the upstream's models with OpenAI's fields only (id, object,
  created, owned_by); llama-server's ``models`` list and ``meta`` are dropped.
- ``POST /v1/chat/completions`` (SSE stream, or one JSON answer): ``model`` is required and
  must be one of /v1/models (as OpenAI does); fields OpenAI does not define (``cache_prompt``,
  ``id_slot``, ``timings_per_token``, ...) are ignored, i.e. not forwarded; ``timings`` is
  stripped from every chunk; ``usage`` only comes when ``stream_options.include_usage`` asks.
- everything else (``/slots``, ``/props``, ``/health``, ``/metrics``...): 404.

When the client hangs up, the upstream stream is closed at once, so llama-server still
cancels the generation; the client just cannot see that (no /slots).

    scripts/plain_openai.py --upstream http://127.0.0.1:8080 --port 8090
    voice-llm replay samples/03_sky_blue.wav --llm-url http://127.0.0.1:8090
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from typing import Any

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, web

log = logging.getLogger("plain_openai")

# The chat request fields OpenAI defines; the rest is dropped before forwarding.
OPENAI_FIELDS = frozenset({
    "messages", "model", "max_tokens", "max_completion_tokens", "temperature", "top_p",
    "seed", "stop", "stream", "stream_options", "n", "presence_penalty",
    "frequency_penalty", "logit_bias", "logprobs", "top_logprobs", "user",
    "response_format", "tools", "tool_choice", "parallel_tool_calls"})
MODEL_FIELDS = ("id", "object", "created", "owned_by")

UPSTREAM: web.AppKey[str] = web.AppKey("upstream", str)
SESSION: web.AppKey[ClientSession] = web.AppKey("session", ClientSession)


def error(status: int, message: str, kind: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind}}, status=status)


async def upstream_models(app: web.Application) -> list[dict[str, Any]]:
    async with app[SESSION].get(app[UPSTREAM] + "/v1/models") as response:
        body = await response.json(content_type=None)
    data = body.get("data") if isinstance(body, dict) else None
    return [{k: m[k] for k in MODEL_FIELDS if k in m}
            for m in (data if isinstance(data, list) else []) if isinstance(m, dict)]


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": await upstream_models(request.app)})


def plain_chunk(chunk: dict[str, Any], want_usage: bool) -> dict[str, Any] | None:
    """A stream chunk as a plain server sends it; None when nothing is left of it."""
    chunk.pop("timings", None)
    if not want_usage:
        chunk.pop("usage", None)
    if chunk.get("choices") == [] and "usage" not in chunk:
        return None  # llama-server's usage/timings-only last chunk, not asked for
    return chunk


@web.middleware
async def upstream_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """llama-server down or broken: 502 with one line, as a gateway says it."""
    try:
        response: web.StreamResponse = await handler(request)
        return response
    except ClientError as e:
        return error(502, f"upstream llama-server at {request.app[UPSTREAM]} failed: "
                     f"{type(e).__name__}", "upstream_error")


async def chat(request: web.Request) -> web.StreamResponse:
    try:
        body = await request.json()
    except ValueError:
        return error(400, "the body is not JSON", "invalid_request_error")
    if not isinstance(body, dict):
        return error(400, "the body must be a JSON object", "invalid_request_error")
    ignored = sorted(set(body) - OPENAI_FIELDS)
    if ignored:
        log.info("ignored fields: %s", ", ".join(ignored))
    forwarded = {k: v for k, v in body.items() if k in OPENAI_FIELDS}
    ids = [m.get("id") for m in await upstream_models(request.app)]
    if "model" not in forwarded:  # as OpenAI: the model is not optional
        return error(400, "you must provide a model parameter (GET /v1/models lists them)",
                     "invalid_request_error")
    if forwarded["model"] not in ids:
        return error(404, f"the model {forwarded['model']!r} does not exist "
                     "(GET /v1/models lists them)", "invalid_request_error")
    options = forwarded.get("stream_options")
    want_usage = isinstance(options, dict) and options.get("include_usage") is True
    session = request.app[SESSION]
    async with session.post(request.app[UPSTREAM] + "/v1/chat/completions",
                            json=forwarded) as upstream:
        if upstream.content_type != "text/event-stream":  # an error, or stream: false
            answer = await upstream.json(content_type=None)
            if isinstance(answer, dict):
                answer.pop("timings", None)
            return web.json_response(answer, status=upstream.status)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        try:
            async for line in upstream.content:  # SSE: one "data: ..." line per event
                out = relay_line(line, want_usage)
                if out is not None:
                    await response.write(out)
        except (ConnectionResetError, asyncio.CancelledError):
            # The client hung up: leaving the block closes the upstream connection, which
            # is what makes llama-server cancel the generation.
            log.info("client closed the stream; upstream closed")
            raise
        await response.write_eof()
        return response


def relay_line(line: bytes, want_usage: bool) -> bytes | None:
    """One upstream SSE line as the plain server sends it (None: drop it). Blank lines,
    comments (``:`` pings) and ``data: [DONE]`` pass unchanged."""
    text = line.decode("utf-8", errors="replace").rstrip("\r\n")
    if not text.startswith("data:") or text[5:].strip() == "[DONE]":
        return (text + "\n").encode()
    try:
        chunk = json.loads(text[5:])
    except ValueError:
        return (text + "\n").encode()  # not ours to repair: the client reports it
    if isinstance(chunk, dict):
        plain = plain_chunk(chunk, want_usage)
        if plain is None:
            return None
        chunk = plain
    return f"data: {json.dumps(chunk, ensure_ascii=False)}\n".encode()


async def not_found(request: web.Request) -> web.Response:
    return error(404, f"{request.method} {request.path}: not found", "not_found_error")


def make_app(upstream: str) -> web.Application:
    app = web.Application(middlewares=[upstream_errors])
    app[UPSTREAM] = upstream.rstrip("/")

    async def session_ctx(app: web.Application) -> Any:
        # force_close: each upstream stream has its own connection, closed on hang-up.
        app[SESSION] = ClientSession(connector=TCPConnector(force_close=True),
                                     timeout=ClientTimeout(total=None, sock_read=120))
        yield
        await app[SESSION].close()

    app.cleanup_ctx.append(session_ctx)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="plain_openai.py",
        description="A plain OpenAI-shaped server for tests and measurements: forwards "
        "/v1/models and /v1/chat/completions to a real llama-server and hides its extras "
        "(timings, /slots, /props, /health, cache_prompt, id_slot). Not another engine: "
        "llama-server with its extras hidden (docs/llm-servers.md).")
    parser.add_argument("--upstream", default="http://127.0.0.1:8080",
                        help="the llama-server to forward to (default %(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address "
                        "(default %(default)s)")
    parser.add_argument("--port", type=int, default=8090, help="listen port "
                        "(default %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log ignored fields and hang-ups")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="plain_openai: %(message)s")
    print(f"plain OpenAI-shaped server on http://{args.host}:{args.port} "
          f"(llama-server at {args.upstream}, extras hidden)", file=sys.stderr, flush=True)
    try:
        web.run_app(make_app(args.upstream), host=args.host, port=args.port,
                    print=None, handler_cancellation=True)
    except OSError as e:
        print(f"plain_openai.py: cannot listen on {args.host}:{args.port}: {e.strerror}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""The lab's SSE reader: one streamed chat request, every chunk timestamped.

    scripts/sse.py --prompt "Why is the sky blue?" --max-tokens 48
    scripts/sse.py --no-cache            # cold prefill (cache_prompt: false)

Prints each SSE data chunk as it arrives with milliseconds since the request, the raw
JSON compacted and cut to the terminal width. Marks the role-only chunk (ROLE: not a token),
the first content token (FIRST = TTFT), the finish chunk and [DONE], then the server's
timings. Keep-alive ":" pings are comments and are not shown (the parser drops them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from pipeline.llm_client import (  # noqa: E402
    ChatOptions,
    ChatStream,
    Finished,
    LlmClient,
    LlmError,
    ResponseStarted,
    RoleChunk,
    TokenDelta,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="llama-server base URL")
    parser.add_argument("--prompt", default="Explain in two sentences why the sky is blue.")
    parser.add_argument("--system", default=None, help="optional system message")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--no-cache", action="store_true",
                        help="send cache_prompt: false (cold prefill)")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--read-timeout", type=float, default=30.0)
    return parser.parse_args(argv)


class ChunkPrinter:
    """Prints raw payloads as they arrive and labels them from the typed events."""

    def __init__(self, stream: ChatStream) -> None:
        self.stream = stream
        self.width = shutil.get_terminal_size((120, 24)).columns
        self.first_token_at: float | None = None
        self.role_at: float | None = None
        self.first_labelled = False  # payloads of one read are printed before its events

    def ms(self, t: float) -> str:
        return f"{(t - self.stream.request_at) * 1000:9.1f} ms"

    def on_payload(self, t: float, payload: str) -> None:
        print(f"{self.ms(t)}  {self.label(payload):6}  {self.compact(payload)}", flush=True)

    def label(self, payload: str) -> str:
        if payload == "[DONE]":
            return "DONE"
        chunk = _loads(payload)
        choice = (chunk.get("choices") or [{}])[0] if isinstance(chunk, dict) else {}
        delta = choice.get("delta") or {}
        if isinstance(chunk, dict) and "error" in chunk:
            return "ERROR"
        if choice.get("finish_reason"):
            return "FINISH"
        if delta.get("content") and not self.first_labelled:
            self.first_labelled = True
            return "FIRST"
        if "role" in delta and not delta.get("content"):
            return "ROLE"
        return ""

    def compact(self, payload: str) -> str:
        data = _loads(payload)
        text = payload if data is None else json.dumps(data, separators=(",", ":"),
                                                       ensure_ascii=False)
        room = max(self.width - 23, 20)
        return text if len(text) <= room else text[:room - 1] + "…"

    def on_event(self, event: ResponseStarted | RoleChunk | TokenDelta | Finished) -> None:
        if isinstance(event, ResponseStarted):
            print(f"{self.ms(event.t)}  HTTP {event.status}", flush=True)
        elif isinstance(event, RoleChunk):
            self.role_at = event.t
        elif isinstance(event, TokenDelta) and self.first_token_at is None:
            self.first_token_at = event.t


def summary(printer: ChunkPrinter, stream: ChatStream) -> list[str]:
    ms = printer.ms
    lines = []
    if printer.role_at is not None:
        lines.append(f"role-only chunk   {ms(printer.role_at)}  (not a token)")
    if printer.first_token_at is not None:
        lines.append(f"first token TTFT  {ms(printer.first_token_at)}")
    finished = stream.finished
    if finished is not None:
        lines.append(f"finish            {ms(finished.t)}  reason={finished.finish_reason}")
        timings = finished.timings
        if timings:
            lines.append("server timings    " + _format_timings(timings))
            if printer.first_token_at is not None and "prompt_ms" in timings:
                ttft = (printer.first_token_at - stream.request_at) * 1000
                lines.append(f"TTFT - prompt_ms  {ttft - timings['prompt_ms']:9.1f} ms"
                             "  (queueing + HTTP + first decode step)")
        if finished.usage:
            lines.append("usage             " + json.dumps(finished.usage))
    lines.append(f"reply             {stream.text!r}")
    return lines


def _format_timings(timings: dict[str, Any]) -> str:
    keys = ("cache_n", "prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
            "predicted_per_second")
    return "  ".join(f"{k}={_num(timings[k])}" for k in keys if k in timings)


def _num(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def _loads(payload: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return None


async def run(args: argparse.Namespace) -> int:
    messages = [{"role": "user", "content": args.prompt}]
    if args.system:
        messages.insert(0, {"role": "system", "content": args.system})
    options = ChatOptions(max_tokens=args.max_tokens, cache_prompt=not args.no_cache,
                          seed=args.seed)
    async with LlmClient(args.url, read_timeout=args.read_timeout) as client:
        stream = client.stream_chat(messages, options)
        printer = ChunkPrinter(stream)
        stream.on_payload = printer.on_payload
        print(f"POST {args.url}/v1/chat/completions  max_tokens={args.max_tokens} "
              f"cache_prompt={str(not args.no_cache).lower()}")
        async with stream:
            async for event in stream:
                printer.on_event(event)
        print(f"{printer.ms(stream.closed_at or time.monotonic())}  connection closed")
    print("\n".join(summary(printer, stream)))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return asyncio.run(run(args))
    except LlmError as exc:
        print(f"sse.py: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

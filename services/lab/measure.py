"""One timed chat request: the numbers every experiment is built from.

Times are client-side, from ``stream.request_at`` (just before the request is sent) to the
event's monotonic timestamp; server-side numbers come from the final chunk's ``timings``.
TTFT is the first *content* delta: the role-only first chunk is not a token (docs/llama-server.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.llm_client import ChatOptions, Finished, LlmClient, TokenDelta
from services.lab.sentences import first_sentence_end

Messages = list[dict[str, str]]


@dataclass
class Measurement:
    ttft_ms: float | None
    first_sentence_ms: float | None
    # "mark": a terminal mark + whitespace decided it; "end": the reply ended first, so the
    # splitter would flush it then; None: empty reply.
    first_sentence_by: str | None
    total_ms: float
    finish_reason: str | None
    timings: dict[str, Any]
    usage: dict[str, Any]
    text: str

    def timing(self, key: str) -> Any:
        return self.timings.get(key)

    @property
    def completion_tokens(self) -> int | None:
        value = self.usage.get("completion_tokens", self.timings.get("predicted_n"))
        return int(value) if value is not None else None

    def cache_row(self) -> dict[str, Any]:
        """The ``{prompt_n, cache_n, ttft_ms}`` triple the cache experiments report."""
        return {"prompt_n": self.timing("prompt_n"), "cache_n": self.timing("cache_n"),
                "ttft_ms": rounded(self.ttft_ms), "prompt_ms": rounded(self.timing("prompt_ms"))}


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(float(value), digits)


def chat(system: str, user: str) -> Messages:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


async def measure(client: LlmClient, messages: Messages, options: ChatOptions) -> Measurement:
    """Send one request, read it to the end, and time the first token, first sentence, end."""
    ttft: float | None = None
    first_sentence: float | None = None
    finished: Finished | None = None
    async with client.stream_chat(messages, options) as stream:
        text = ""
        async for event in stream:
            if isinstance(event, TokenDelta) and event.text:
                text += event.text
                if ttft is None:
                    ttft = event.t - stream.request_at
                if first_sentence is None and first_sentence_end(text) is not None:
                    first_sentence = event.t - stream.request_at
            elif isinstance(event, Finished):
                finished = event
        request_at = stream.request_at
    end_t = finished.t if finished is not None else stream.closed_at or request_at
    total = end_t - request_at
    by: str | None = "mark"
    if first_sentence is None:
        by = "end" if text.strip() else None
        first_sentence = total if text.strip() else None
    return Measurement(
        ttft_ms=_ms(ttft), first_sentence_ms=_ms(first_sentence), first_sentence_by=by,
        total_ms=total * 1000.0,
        finish_reason=finished.finish_reason if finished else None,
        timings=dict(finished.timings or {}) if finished else {},
        usage=dict(finished.usage or {}) if finished else {},
        text=text,
    )


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0

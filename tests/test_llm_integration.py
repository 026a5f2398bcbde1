"""LlmClient against the REAL llama-server (``llama_server`` fixture, bundled model).

Behaviour and ordering are asserted; the timings are printed ("[measure]", see them with
``pytest -s``) but never used as pass/fail thresholds: the machines are shared and noisy.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.llm_client import (
    ChatOptions,
    ChatStream,
    Finished,
    LlmClient,
    LlmHttpError,
    ResponseStarted,
    RoleChunk,
    StreamEvent,
    TokenDelta,
)

pytestmark = pytest.mark.integration

# A generation that would run for a long time if nobody hung up (ignore_eos: no early stop).
LONG = ChatOptions(max_tokens=512, temperature=0.0, seed=1, extra={"ignore_eos": True})
HANG_GUARD_S = 60.0  # only a guard against hangs on a loaded machine, not a target


@pytest.fixture
async def client(llama_server: Any) -> AsyncIterator[LlmClient]:
    async with LlmClient(llama_server.url, read_timeout=HANG_GUARD_S) as llm:
        yield llm


def ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


async def wait_slot_idle(client: LlmClient) -> float:
    """Poll /slots until the (single) slot is idle; return the monotonic time it was seen."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        slots = await client.get_json("/slots")
        if not any(slot["is_processing"] for slot in slots):
            return time.monotonic()
        await asyncio.sleep(0.002)
    raise AssertionError("slot still processing long after the client hung up")


def log_tail(path: Path, offset: int) -> str:
    with path.open("rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


async def test_one_streamed_request(client: LlmClient) -> None:
    options = ChatOptions(max_tokens=24, cache_prompt=False, temperature=0.0, seed=1)
    async with client.stream_chat(ask("Name three colours."), options) as stream:
        events: list[StreamEvent] = [event async for event in stream]

    assert isinstance(events[0], ResponseStarted) and events[0].status == 200
    role_at = next(i for i, e in enumerate(events) if isinstance(e, RoleChunk))
    first_token = next(i for i, e in enumerate(events) if isinstance(e, TokenDelta))
    assert role_at < first_token  # the role-only chunk comes first and is not a token
    assert isinstance(events[-1], Finished) and stream.finished is events[-1]
    assert events[-1].finish_reason in ("stop", "length")
    timings = events[-1].timings
    assert timings["prompt_n"] > 0 and timings["predicted_n"] > 0 and "prompt_ms" in timings
    assert stream.text == "".join(e.text for e in events if isinstance(e, TokenDelta))
    assert stream.closed_at is not None
    ttft_ms = (events[first_token].t - stream.request_at) * 1000
    print(f"[measure] TTFT {ttft_ms:.1f} ms, server prompt_ms {timings['prompt_ms']:.1f} "
          f"(prompt_n {timings['prompt_n']}), decode "
          f"{timings.get('predicted_per_second', 0):.0f} tok/s")


async def test_same_prompt_twice_reuses_the_cache(client: LlmClient) -> None:
    # A nonce makes the prompt new to the slot, whatever ran before in this session.
    messages = ask(f"Request {uuid.uuid4().hex[:8]}: describe the sea in one sentence.")
    options = ChatOptions(max_tokens=4, temperature=0.0, seed=1)  # cache_prompt defaults on
    runs = []
    for _ in range(2):
        async with client.stream_chat(messages, options) as stream:
            async for _event in stream:
                pass
        assert stream.finished is not None
        runs.append(stream.finished.timings)
    first, second = runs
    assert second["prompt_n"] <= 2  # a fully cached prompt still evaluates 1 token
    assert second["cache_n"] >= first["prompt_n"] - 2
    print(f"[measure] cache: first prompt_n {first['prompt_n']} cache_n {first['cache_n']}; "
          f"second prompt_n {second['prompt_n']} cache_n {second['cache_n']}")


async def hang_up_after_tokens(client: LlmClient, n_tokens: int) -> ChatStream:
    async with client.stream_chat(ask("Write a very long story about a lighthouse."),
                                  LONG) as stream:
        seen = 0
        async for event in stream:
            if isinstance(event, TokenDelta):
                seen += 1
                if seen >= n_tokens:
                    break  # leaving the async-with closes the TCP connection
    return stream


async def test_closing_mid_stream_cancels_the_server_task(llama_server: Any,
                                                          client: LlmClient) -> None:
    await wait_slot_idle(client)
    offset = llama_server.log_path.stat().st_size
    stream = await hang_up_after_tokens(client, 3)
    assert stream.closed_at is not None and stream.finished is None
    idle_at = await wait_slot_idle(client)
    await asyncio.sleep(0.05)  # let the log line reach the file
    assert "cancel task" in log_tail(llama_server.log_path, offset)
    print(f"[measure] close -> /slots idle {(idle_at - stream.closed_at) * 1000:.1f} ms")


async def test_cancelling_the_consumer_cancels_the_server_task(llama_server: Any,
                                                               client: LlmClient) -> None:
    await wait_slot_idle(client)
    offset = llama_server.log_path.stat().st_size
    holder: list[ChatStream] = []
    got_token = asyncio.Event()

    async def consume() -> None:
        async with client.stream_chat(ask("Count slowly from one to one thousand."),
                                      LONG) as stream:
            holder.append(stream)
            async for event in stream:
                if isinstance(event, TokenDelta):
                    got_token.set()

    task = asyncio.create_task(consume(), name="llm-consumer")
    await asyncio.wait_for(got_token.wait(), HANG_GUARD_S)
    task.cancel()  # what a barge-in does to the turn's LLM task
    with pytest.raises(asyncio.CancelledError):
        await task
    closed_at = holder[0].closed_at
    assert closed_at is not None
    idle_at = await wait_slot_idle(client)
    await asyncio.sleep(0.05)
    assert "cancel task" in log_tail(llama_server.log_path, offset)
    print(f"[measure] cancel -> /slots idle {(idle_at - closed_at) * 1000:.1f} ms")


async def test_prompt_longer_than_context_is_an_http_error(client: LlmClient) -> None:
    with pytest.raises(LlmHttpError) as info:
        async with client.stream_chat(ask("hello " * 5000), ChatOptions(max_tokens=4)) as s:
            async for _event in s:
                pass
    assert info.value.status == 400
    assert "exceed_context_size_error" in str(info.value)


async def test_get_json_endpoints(client: LlmClient) -> None:
    assert (await client.get_json("/health"))["status"] == "ok"
    props = await client.get_json("/props")
    assert "default_generation_settings" in props
    slots = await client.get_json("/slots")
    assert isinstance(slots, list) and "is_processing" in slots[0]

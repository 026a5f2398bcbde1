"""LlmClient / ChatStream against the fake llama-server (real sockets, no model)."""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from fake_llm import FakeLlm, Reply

from pipeline.llm_client import (
    ChatOptions,
    ChatStream,
    Finished,
    LlmClient,
    LlmHttpError,
    LlmStreamError,
    LlmTimeout,
    LlmUnreachable,
    ResponseStarted,
    RoleChunk,
    StreamEvent,
    TokenDelta,
)

MESSAGES = [{"role": "user", "content": "Hello?"}]
TOKENS = ["Hello", "!", " How", " can", " I", " help", "?"]


@pytest.fixture
async def fake() -> AsyncIterator[FakeLlm]:
    async with FakeLlm() as server:
        yield server


@pytest.fixture
async def client(fake: FakeLlm) -> AsyncIterator[LlmClient]:
    async with LlmClient(fake.url, read_timeout=2.0) as llm:
        yield llm


async def collect(client: LlmClient, options: ChatOptions | None = None
                  ) -> tuple[ChatStream, list[StreamEvent]]:
    async with client.stream_chat(MESSAGES, options) as stream:
        events = [event async for event in stream]
    return stream, events


def kinds(events: list[StreamEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


def tokens(events: list[Any]) -> list[str]:
    return [e.text for e in events if isinstance(e, TokenDelta)]


# --- the normal stream ---------------------------------------------------------------

async def test_events_in_order(client: LlmClient) -> None:
    stream, events = await collect(client)
    assert kinds(events) == (["ResponseStarted", "RoleChunk"] + ["TokenDelta"] * 7
                             + ["Finished"])
    assert tokens(events) == TOKENS
    assert stream.text == "".join(TOKENS)
    assert isinstance(events[0], ResponseStarted) and events[0].status == 200
    times = [e.t for e in events]
    assert stream.request_at <= times[0] and times == sorted(times)


async def test_finished_carries_reason_timings_usage(client: LlmClient) -> None:
    stream, events = await collect(client)
    finished = events[-1]
    assert isinstance(finished, Finished) and stream.finished is finished
    assert finished.finish_reason == "stop"
    assert finished.timings["predicted_n"] == 7 and "prompt_ms" in finished.timings
    assert finished.usage["completion_tokens"] == 7


async def test_connection_closed_when_stream_ends(client: LlmClient) -> None:
    stream, events = await collect(client)
    assert stream.closed_at is not None and stream.closed_at >= events[-1].t


async def test_request_body_and_headers(fake: FakeLlm, client: LlmClient) -> None:
    options = ChatOptions(max_tokens=32, cache_prompt=False, temperature=0.0, seed=7,
                          id_slot=0, extra={"top_k": 1, "stream": False})
    await collect(client, options)
    body = fake.requests[-1].body
    assert body == {"messages": MESSAGES, "cache_prompt": False, "max_tokens": 32,
                    "temperature": 0.0, "seed": 7, "id_slot": 0, "top_k": 1,
                    "stream": True}  # extra cannot switch streaming off
    headers = {k.lower() for k in fake.requests[-1].headers}
    assert "x-conversation-id" not in headers  # would keep generation alive after a close
    assert "authorization" not in headers


async def test_default_options_only_send_what_is_set(fake: FakeLlm, client: LlmClient) -> None:
    await collect(client)
    assert fake.requests[-1].body == {"messages": MESSAGES, "cache_prompt": True,
                                      "stream": True}


async def test_api_key_sent_as_bearer(fake: FakeLlm) -> None:
    async with LlmClient(fake.url, api_key="sekrit") as llm:
        await collect(llm)
    assert fake.requests[-1].headers["Authorization"] == "Bearer sekrit"


async def test_each_stream_uses_a_fresh_connection(fake: FakeLlm, client: LlmClient) -> None:
    await collect(client)
    await collect(client)
    assert fake.requests[0].peer != fake.requests[1].peer  # never pooled


# --- llama-server quirks ---------------------------------------------------------------

async def test_role_chunk_is_not_a_token(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(tokens=["A"], token_delay=0.05)
    _, events = await collect(client)
    role, first = events[1], events[2]
    assert isinstance(role, RoleChunk) and isinstance(first, TokenDelta)
    assert first.t - role.t >= 0.04  # TTFT is the token's time, not the role chunk's


async def test_without_role_chunk(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(role_chunk=False)
    _, events = await collect(client)
    assert "RoleChunk" not in kinds(events) and tokens(events) == TOKENS


async def test_pings_are_ignored(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(pings=2, token_delay=0.001)
    stream, events = await collect(client)
    assert tokens(events) == TOKENS and stream.finished is not None


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
async def test_other_line_ends(fake: FakeLlm, client: LlmClient, newline: str) -> None:
    fake.reply = Reply(newline=newline)
    _, events = await collect(client)
    assert tokens(events) == TOKENS and isinstance(events[-1], Finished)


async def test_events_split_across_reads(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(newline="\r\n", write_size=5, piece_delay=0.0005, tokens=["é🙂", "!"])
    _, events = await collect(client)
    assert tokens(events) == ["é🙂", "!"] and isinstance(events[-1], Finished)


async def test_empty_content_deltas_are_not_tokens(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(tokens=["", "a", ""])
    _, events = await collect(client)
    assert tokens(events) == ["a"]


async def test_usage_may_be_absent(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(usage={})
    stream, _ = await collect(client)
    assert stream.finished is not None and stream.finished.usage == {}
    assert stream.finished.timings


async def test_usage_chunk_after_finish(fake: FakeLlm, client: LlmClient) -> None:
    # With stream_options.include_usage llama-server moves usage+timings to a last chunk
    # with empty choices; Finished still gets them.
    fake.reply = Reply(usage_chunk=True)
    stream, events = await collect(client)
    assert kinds(events).count("Finished") == 1
    assert stream.finished is not None and stream.finished.finish_reason == "stop"
    assert stream.finished.timings["predicted_n"] == 7 and stream.finished.usage


async def test_finish_without_done_is_accepted(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(done=False)
    stream, _ = await collect(client)
    assert stream.finished is not None and stream.finished.finish_reason == "stop"


async def test_done_without_finish_chunk(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(finish_reason=None)
    stream, _ = await collect(client)
    assert stream.finished is not None and stream.finished.finish_reason is None


async def test_bytes_after_done_are_ignored(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(raw=[b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n',
                            b"data: [DONE]\n\ndata: {broken\n\n"])
    stream, _ = await collect(client)
    assert stream.text == "x" and stream.finished is not None


# --- errors ----------------------------------------------------------------------------

async def test_in_stream_error_after_tokens(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(error_after=2, error_message="out of memory")
    seen: list[StreamEvent] = []
    async with client.stream_chat(MESSAGES) as stream:
        with pytest.raises(LlmStreamError, match="mid-stream: out of memory") as info:
            async for event in stream:
                seen.append(event)
    assert tokens(seen) == ["Hello", "!"]  # what came before the error is delivered
    assert stream.closed_at is not None and stream.finished is None
    assert "\n" not in str(info.value)


async def test_malformed_chunk(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(raw=[b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n',
                            b"data: {not json\n\n", 0.5, b"data: [DONE]\n\n"])
    with pytest.raises(LlmStreamError, match="malformed stream chunk"):
        await collect(client)


async def test_non_object_chunk(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(raw=[b"data: [1, 2]\n\n"])
    with pytest.raises(LlmStreamError, match="malformed"):
        await collect(client)


async def test_stream_ends_without_finish(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(finish_reason=None, done=False)
    with pytest.raises(LlmStreamError, match="before finishing"):
        await collect(client)


async def test_abrupt_disconnect_mid_stream(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(disconnect_after=3, token_delay=0.01)
    seen: list[StreamEvent] = []
    async with asyncio.timeout(5):  # an error, never a hang
        with pytest.raises(LlmStreamError, match="lost mid-stream") as info:
            async with client.stream_chat(MESSAGES) as stream:
                async for event in stream:
                    seen.append(event)
    assert tokens(seen) == TOKENS[:3]
    assert "\n" not in str(info.value)


async def test_disconnect_before_headers(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(raw=["disconnect"])
    with pytest.raises(LlmStreamError):
        await collect(client)


async def test_http_error_carries_server_message(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(status=400)
    with pytest.raises(LlmHttpError) as info:
        await collect(client)
    error = info.value
    assert error.status == 400 and "exceed_context_size_error" in error.body
    assert "exceeds the available context size" in str(error)
    assert "exceed_context_size_error" in str(error) and "HTTP 400" in str(error)


async def test_http_error_with_plain_text_body(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(status=500, error_body="boom\nline two")
    with pytest.raises(LlmHttpError, match="HTTP 500 on /v1/chat/completions: boom line two"):
        await collect(client)


async def test_not_an_event_stream(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(content_type="application/json")
    with pytest.raises(LlmStreamError, match="not an event stream"):
        await collect(client)


async def test_unreachable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connection refused
        async with LlmClient(f"http://127.0.0.1:{port}") as llm:
            with pytest.raises(LlmUnreachable, match="no llama-server at .*voice-llm up"):
                await collect(llm)
            with pytest.raises(LlmUnreachable):
                await llm.get_json("/health")


async def test_silent_server_times_out(fake: FakeLlm) -> None:
    fake.reply = Reply(stall_after=2)
    async with LlmClient(fake.url, read_timeout=0.2) as llm:
        seen: list[StreamEvent] = []
        with pytest.raises(LlmTimeout, match="sent nothing for 0.2 s") as info:
            async with llm.stream_chat(MESSAGES) as stream:
                async for event in stream:
                    seen.append(event)
    assert tokens(seen) == TOKENS[:2] and stream.closed_at is not None
    assert "\n" not in str(info.value)
    record = await fake.wait_disconnect()  # the timeout hung up on the server
    assert record.outcome == "client_gone"


async def test_timeout_waiting_for_headers(fake: FakeLlm) -> None:
    fake.reply = Reply(first_delay=1.0)
    async with LlmClient(fake.url, read_timeout=0.2) as llm:
        with pytest.raises(LlmTimeout):
            await collect(llm)


async def test_slow_stream_is_not_a_timeout(fake: FakeLlm) -> None:
    # read_timeout bounds the silence between bytes, not the whole reply.
    fake.reply = Reply(token_delay=0.06, tokens=["a"] * 6, first_delay=0.1)
    async with LlmClient(fake.url, read_timeout=0.2) as llm:
        stream, events = await collect(llm)
    assert stream.text == "aaaaaa" and isinstance(events[-1], Finished)


# --- hanging up (barge-in) ---------------------------------------------------------------

async def test_break_closes_connection_at_once(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(tokens=["x"] * 200, token_delay=0.01)
    async with client.stream_chat(MESSAGES) as stream:
        async for event in stream:
            if isinstance(event, TokenDelta):
                break
    assert stream.closed_at is not None
    record = await fake.wait_disconnect()
    assert record.outcome == "client_gone" and record.tokens_sent < 200
    assert record.client_gone_at is not None and record.client_gone_at >= stream.closed_at
    await fake.wait_idle(limit_s=1.0)
    slots = await client.get_json("/slots")
    assert slots[0]["is_processing"] is False


async def test_cancelling_consumer_closes_connection(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(tokens=["x"] * 200, token_delay=0.01)
    got_token = asyncio.Event()
    holder: list[ChatStream] = []

    async def consume() -> None:
        async with client.stream_chat(MESSAGES) as stream:
            holder.append(stream)
            async for event in stream:
                if isinstance(event, TokenDelta):
                    got_token.set()

    task = asyncio.create_task(consume())
    await got_token.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert holder[0].closed_at is not None
    record = await fake.wait_disconnect()
    assert record.tokens_sent < 200


async def test_cancel_before_headers_closes_connection(fake: FakeLlm,
                                                       client: LlmClient) -> None:
    fake.reply = Reply(first_delay=5.0)  # a long prefill
    holder: list[ChatStream] = []

    async def consume() -> None:
        async with client.stream_chat(MESSAGES) as stream:
            holder.append(stream)
            async for _ in stream:
                pass

    task = asyncio.create_task(consume())
    await fake.wait_request()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert holder[0].closed_at is not None
    await fake.wait_disconnect(limit_s=2.0)


async def test_aclose_from_another_task_ends_iteration(fake: FakeLlm,
                                                       client: LlmClient) -> None:
    fake.reply = Reply(tokens=["x"] * 200, token_delay=0.01)
    closers: list[asyncio.Task[None]] = []
    async with client.stream_chat(MESSAGES) as stream:
        count = 0
        async for event in stream:
            if isinstance(event, TokenDelta):
                count += 1
                if count == 3:
                    # Barge-in: another task hangs up while this one is reading.
                    closers.append(asyncio.create_task(stream.aclose()))
        # The loop ended quietly: no exception for our own hang-up.
        await closers[0]
    assert stream.finished is None and stream.closed_at is not None
    assert 3 <= count < 200
    await fake.wait_disconnect()


async def test_aclose_while_waiting_for_headers(fake: FakeLlm, client: LlmClient) -> None:
    fake.reply = Reply(first_delay=5.0)
    async with client.stream_chat(MESSAGES) as stream:
        async def hang_up() -> None:
            await fake.wait_request()
            await stream.aclose()
        closer = asyncio.create_task(hang_up())
        events = [event async for event in stream]
        await closer
    assert events == [] and stream.closed_at is not None
    await fake.wait_disconnect(limit_s=2.0)


async def test_aclose_is_idempotent_and_nothing_sent_without_iteration(
        fake: FakeLlm, client: LlmClient) -> None:
    async with client.stream_chat(MESSAGES) as stream:
        pass
    first = stream.closed_at
    await stream.aclose()
    assert first is not None and stream.closed_at == first
    assert fake.requests == []
    assert [event async for event in stream] == []


# --- get_json --------------------------------------------------------------------------

async def test_get_json(client: LlmClient) -> None:
    assert await client.get_json("/health") == {"status": "ok"}
    slots = await client.get_json("/slots")
    assert slots[0]["is_processing"] is False


async def test_get_json_http_error(client: LlmClient) -> None:
    with pytest.raises(LlmHttpError) as info:
        await client.get_json("/nope")
    assert info.value.status == 404 and "HTTP 404 on /nope" in str(info.value)


async def test_last_timings_available_before_the_end(fake: FakeLlm, client: LlmClient) -> None:
    # With timings_per_token every chunk carries timings; a stream closed early keeps them.
    chunk = (b'data: {"choices":[{"delta":{"content":"x"}}],'
             b'"timings":{"prompt_n":3,"cache_n":9}}\n\n')
    fake.reply = Reply(raw=[chunk, "stall"])
    async with client.stream_chat(MESSAGES) as stream:
        async for event in stream:
            if isinstance(event, TokenDelta):
                break
    assert stream.last_timings == {"prompt_n": 3, "cache_n": 9} and stream.finished is None


@pytest.mark.parametrize(("status", "words"), [(401, "Invalid API Key (authentication_error) "
                                                    "(give the client the server's --api-key)"),
                                               (503, "Loading model (unavailable_error) "
                                                     "(the model is still loading")])
async def test_http_error_hints(fake: FakeLlm, client: LlmClient, status: int,
                                words: str) -> None:
    fake.reply = Reply(status=status)
    with pytest.raises(LlmHttpError, match=re.escape(words)):
        await collect(client)


async def test_prefill_delay_separates_headers_from_role_chunk(fake: FakeLlm,
                                                               client: LlmClient) -> None:
    fake.reply = Reply(prefill_delay=0.1)  # like the real server: 200 first, tokens later
    _, events = await collect(client)
    assert isinstance(events[0], ResponseStarted) and isinstance(events[1], RoleChunk)
    assert events[1].t - events[0].t >= 0.09


@pytest.mark.parametrize("url", ["127.0.0.1:8080", "ftp://127.0.0.1:8080"])
async def test_bad_url_is_one_clear_line(url: str) -> None:
    async with LlmClient(url) as llm:
        with pytest.raises(LlmUnreachable, match="not a usable llama-server URL"):
            await collect(llm)

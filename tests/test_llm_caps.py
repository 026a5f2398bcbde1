"""Capability detection (pipeline/llm_caps.py) and the figures a plain server cannot give.

The plain server here is scripts/plain_openai.py in front of the fake llama-server (real
sockets); the same proxy in front of the real llama-server is in test_plain_openai.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fake_llm import MODEL, FakeLlm, Reply
from script_module import load_script

from pipeline.audio_out import RealtimeNullSink
from pipeline.conversation import Conversation
from pipeline.llm_caps import (
    LLAMA_ONLY_FIELDS,
    NOT_REPORTED,
    NOT_VERIFIABLE,
    LlmCapabilities,
    not_reported_line,
)
from pipeline.llm_client import ChatOptions, LlmClient, LlmUnsupported
from pipeline.metrics import turn_metrics
from pipeline.turn import TurnConfig, TurnResult, TurnRunner

RATE = 16000
MESSAGES = [{"role": "user", "content": "hi"}]
LLAMA_ANSWERS: dict[str, Any] = {
    "health": (200, {"status": "ok"}),
    "props": (200, {"default_generation_settings": {"n_ctx": 4096}, "total_slots": 1}),
    "slots": (200, [{"id": 0, "is_processing": False}]),
    "models": (200, {"object": "list", "data": [{"id": "m.gguf", "meta": {"n_ctx": 2048}}]}),
}
PLAIN_ANSWERS: dict[str, Any] = {
    "health": (404, {"error": {}}), "props": (404, None), "slots": (404, None),
    "models": (200, {"object": "list", "data": [{"id": "gpt-x", "object": "model"}]}),
}


plain_openai = load_script("plain_openai")


# --- detection from the answers (pure) --------------------------------------------------

def test_llama_server_answers_mean_every_extra() -> None:
    caps = LlmCapabilities.from_answers(**LLAMA_ANSWERS)
    assert caps.llama_server and caps.server == "llama-server"
    assert caps.health and caps.props and caps.slots and caps.models == ("m.gguf",)
    assert caps.n_ctx == 4096  # /props wins over /v1/models' meta
    body = ChatOptions(id_slot=1, extra={"timings_per_token": True}).request_body(MESSAGES)
    assert caps.request_body(body) == body  # llama-server gets its fields
    assert caps.unknowable() == []


def test_plain_answers_mean_no_extras_and_a_model() -> None:
    caps = LlmCapabilities.from_answers(**PLAIN_ANSWERS)
    assert not caps.llama_server and caps.server == "openai-compatible"
    assert not (caps.health or caps.props or caps.slots) and caps.n_ctx is None
    body = ChatOptions(id_slot=1, max_tokens=9, include_usage=True, repeat_penalty=1.15,
                       repeat_last_n=512,
                       extra={"timings_per_token": True}).request_body(MESSAGES)
    assert body["repeat_penalty"] == 1.15 and body["repeat_last_n"] == 512
    sent = caps.request_body(body)
    assert not set(LLAMA_ONLY_FIELDS) & set(sent) and "repeat_penalty" not in sent
    assert sent["model"] == "gpt-x" and sent["max_tokens"] == 9
    assert sent["stream_options"] == {"include_usage": True} and sent["stream"] is True
    assert caps.request_body({**body, "model": "mine"})["model"] == "mine"  # caller's choice


def test_nothing_answering_or_garbage_is_no_extra() -> None:
    caps = LlmCapabilities.from_answers(health=None, props=(200, "not json"),
                                        slots=(200, {"not": "a list"}),
                                        models=(500, None))
    assert not caps.props and not caps.slots and caps.models == ()


def test_stream_observation_decides_once() -> None:
    caps = LlmCapabilities.from_answers(**PLAIN_ANSWERS)
    assert caps.timings is None and caps.usage is None
    assert caps.unknowable() == ["bargein_to_slot_idle_ms"]  # timings not yet known
    caps.observe(timings_seen=False, usage_seen=None)  # a reply cut before its end
    assert caps.timings is False and caps.usage is None
    caps.observe(timings_seen=True, usage_seen=True)  # later streams do not re-decide timings
    assert caps.timings is False and caps.usage is True
    assert caps.unknowable() == ["prefill_ms", "prompt_n", "cache_n", "bargein_to_slot_idle_ms"]
    caps.usage = False
    assert {"prompt_tokens", "completion_tokens", "cached_tokens"} <= set(caps.unknowable())
    assert caps.to_dict()["unknowable"] == caps.unknowable()


def test_the_report_line_says_what_cannot_be_known() -> None:
    line = not_reported_line(["prefill_ms", "prompt_n", "cache_n", "bargein_to_slot_idle_ms"],
                             interrupted=True)
    assert line is not None
    assert f"prefill n/a ({NOT_REPORTED})" in line and f"cache n/a ({NOT_REPORTED})" in line
    assert f"barge-in: {NOT_VERIFIABLE}" in line and " 0" not in line
    uninterrupted = not_reported_line(["bargein_to_slot_idle_ms"], interrupted=False)
    assert uninterrupted is None  # no barge-in: nothing to say
    assert not_reported_line([], interrupted=True) is None


# --- the client against llama-shaped and plain servers ----------------------------------

class CountingFake(FakeLlm):
    """The fake llama-server with /v1/models, counting the GETs it answers."""

    gets: list[str]

    async def start(self) -> None:
        self.gets = []
        app = web.Application(middlewares=[self._count])
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/health", self._health)
        app.router.add_get("/props", self._props)
        app.router.add_get("/slots", self._slots)
        app.router.add_get("/v1/models", self._models)
        self._server = TestServer(app, host="127.0.0.1")
        await self._server.start_server()

    @web.middleware
    async def _count(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.method == "GET":
            self.gets.append(request.path)
        response: web.StreamResponse = await handler(request)
        return response

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list",
                                  "data": [{"id": MODEL, "object": "model"}]})


@pytest.fixture
async def fake() -> AsyncIterator[CountingFake]:
    async with CountingFake(Reply(tokens=["Hi", " there", "."])) as server:
        yield server


@pytest.fixture
async def plain(fake: CountingFake) -> AsyncIterator[str]:
    """scripts/plain_openai.py in front of the fake llama-server: its URL."""
    server = TestServer(plain_openai.make_app(fake.url), host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def one_reply(client: LlmClient, options: ChatOptions | None = None) -> None:
    async with client.stream_chat(MESSAGES, options) as stream:
        async for _ in stream:
            pass


async def test_llama_server_is_detected_once(fake: CountingFake) -> None:
    async with LlmClient(fake.url) as client:
        assert client.caps is None
        await one_reply(client, ChatOptions(id_slot=0))
        await one_reply(client)
        caps = client.caps
        assert caps is not None and caps.server == "llama-server" and caps.timings is True
    assert sorted(fake.gets) == ["/health", "/props", "/slots", "/v1/models"]  # once
    assert fake.requests[0].body["id_slot"] == 0 and "model" not in fake.requests[0].body


async def test_plain_server_gets_no_llama_fields(fake: CountingFake, plain: str) -> None:
    async with LlmClient(plain) as client:
        await one_reply(client, ChatOptions(id_slot=0, include_usage=True,
                                            extra={"timings_per_token": True}))
        caps = client.caps
        assert caps is not None and caps.server == "openai-compatible"
        assert caps.timings is False and caps.usage is True and not caps.slots
        with pytest.raises(LlmUnsupported, match=NOT_VERIFIABLE):
            await client.wait_slot_idle(1.0)
    sent = fake.requests[-1].body  # what reached the server behind the proxy
    assert sent["model"] == MODEL and not set(LLAMA_ONLY_FIELDS) & set(sent)


async def test_usage_without_include_usage_is_not_decided(fake: CountingFake,
                                                          plain: str) -> None:
    async with LlmClient(plain) as client:
        await one_reply(client)  # usage not asked: nothing learnt about it
        assert client.caps is not None and client.caps.usage is None


async def test_nothing_answering_is_asked_again_next_time() -> None:
    async with LlmClient("http://127.0.0.1:9", connect_timeout=1) as client:
        assert await client.capabilities() is None
        assert client.caps is None


# --- a turn against the plain server: what it cannot know is None, and said so ---------

class Asr:
    def transcribe(self, audio: np.ndarray) -> str:
        return "How do I sleep better?"


class Tts:
    sample_rate = RATE

    def synthesize(self, text: str) -> np.ndarray:
        return np.ones(len(text) * RATE // 100, dtype=np.int16)  # 10 ms per character

    def abort(self, thread_id: int | None = None) -> None:
        """Instant synthesis: nothing to abort."""


async def run_turn(url: str, *, interrupt_after_s: float | None = None) -> TurnResult:
    sink = RealtimeNullSink()
    await sink.open(RATE)
    async with LlmClient(url) as client:
        runner = TurnRunner(Asr(), client, Tts(), sink, Conversation(),
                            TurnConfig(max_sentences=None))
        speaking = asyncio.Event()
        runner.listeners.append(lambda e: speaking.set() if e.name == "playback.start"
                                else None)

        async def barge_in() -> None:
            await speaking.wait()
            await asyncio.sleep(interrupt_after_s or 0)
            runner.interrupt("test")

        task = asyncio.create_task(barge_in()) if interrupt_after_s is not None else None
        result = await asyncio.wait_for(runner.run(np.zeros(RATE, np.float32)), 10)
        if task is not None:
            await task
        return result


def event_data(result: TurnResult, name: str) -> dict[str, Any]:
    return next(e.data for e in result.events if e.name == name)


async def test_plain_turn_completes_and_names_what_it_cannot_know(plain: str) -> None:
    result = await run_turn(plain)
    assert result.error is None and result.reply == "Hi there."
    caps = event_data(result, "llm.capabilities")
    assert caps["server"] == "openai-compatible" and caps["timings"] is False
    m = result.metrics
    assert m.prefill_ms is None and m.prompt_n is None and m.cache_n is None  # never 0
    assert m.completion_tokens == 3 and m.prompt_tokens is not None  # from usage
    assert {"prefill_ms", "cache_n", "bargein_to_slot_idle_ms"} <= set(m.not_reported)
    assert m.to_dict()["not_reported"] == list(m.not_reported)
    assert m.first_audio_ms is not None and m.ttft_ms is not None  # measured client-side


async def test_llama_turn_reports_everything(fake: CountingFake) -> None:
    result = await run_turn(fake.url)
    assert event_data(result, "llm.capabilities")["unknowable"] == []
    m = result.metrics
    assert m.prefill_ms is not None and m.cache_n is not None and m.not_reported == ()


async def test_plain_barge_in_is_closed_but_not_verifiable(fake: CountingFake,
                                                           plain: str) -> None:
    fake.reply = Reply(tokens=["Sleep", " well", "."] + [" Sleep", " well", "."] * 30,
                       token_delay=0.02)
    result = await run_turn(plain, interrupt_after_s=0.02)
    assert result.interrupted and result.error is None
    idle = event_data(result, "server.slot_idle")
    assert idle == {"confirmed": False, "verifiable": False, "reason": NOT_VERIFIABLE}
    m = result.metrics
    assert m.bargein_to_llm_closed_ms is not None  # our side of the hang-up is measured
    assert m.bargein_to_slot_idle_ms is None and "bargein_to_slot_idle_ms" in m.not_reported
    assert m.to_dict()["bargein_to_slot_idle_ms"] is None
    # The proxy passed the hang-up on: the server behind it stopped streaming.
    assert (await fake.wait_disconnect()).outcome == "client_gone"
    # Recomputing from the log gives the same (metrics come from events only).
    assert turn_metrics(result.events, "streamed") == m

"""Two API sessions at once on a REAL two-slot llama-server: each keeps its own slot and
its KV prefix (cache_n on turns 2+ as high as alone), and a barge-in in one is confirmed
idle on its own slot while the other session is generating.

Text turns and a fake TTS: the point is the server's slots, not Whisper or Piper.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from test_web import FakeAsr, FakeTts

from pipeline.llm_client import LlmClient
from services.assistant import Assistant
from services.server_check import free_port
from services.web import create_app

pytestmark = pytest.mark.integration

QUESTIONS = [["How do I sleep better?", "And what about naps?", "Is coffee bad for sleep?"],
             ["Why is the sky blue?", "What about sunsets?", "And the colour of the sea?"]]


@pytest.fixture(scope="module")
def two_slot_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from services import models
    from services.errors import UserError
    from services.llama_server import LlamaServer, ServerOptions

    try:
        models.llama_server_binary()
        models.llm_model()
    except UserError as e:
        pytest.skip(f"real llama-server not available: {e}")
    server = LlamaServer(Path(tmp_path_factory.mktemp("two-slot-state")))
    info = server.start(ServerOptions(port=free_port(), parallel=2, ctx=4096), quiet=True)
    try:
        yield info
    finally:
        server.stop()


@pytest.fixture
async def client(two_slot_server: Any) -> AsyncIterator[TestClient[Any, Any]]:
    llm = LlmClient(two_slot_server.url)
    await llm.__aenter__()
    assistant = Assistant(FakeAsr(), FakeTts(), llm, two_slot_server.url)  # type: ignore[arg-type]
    try:
        async with TestClient(TestServer(create_app(assistant, slots=2))) as c:
            yield c
    finally:
        await llm.close()


async def turn(client: TestClient[Any, Any], sid: str, text: str,
               interrupt_after_audio: bool = False, max_sentences: int = 2
               ) -> list[dict[str, Any]]:
    resp = await client.post(f"/v1/sessions/{sid}/turns",
                             json={"text": text, "max_sentences": max_sentences})
    assert resp.status == 200
    lines = []
    async for raw in resp.content:
        line = json.loads(raw)
        lines.append(line)
        if interrupt_after_audio and line["type"] == "audio":
            interrupt_after_audio = False
            await client.post(f"/v1/sessions/{sid}/interrupt")
    return lines


async def test_two_sessions_keep_their_slots_and_caches(client: TestClient[Any, Any]) -> None:
    sids = [(await (await client.post("/v1/sessions")).json())["id"] for _ in range(2)]

    async def conversation(k: int) -> list[dict[str, Any]]:
        return [(await turn(client, sids[k], q))[-1] for q in QUESTIONS[k]]

    results = await asyncio.gather(conversation(0), conversation(1))
    for k, session_results in enumerate(results):
        assert {r["id_slot"] for r in session_results} == {k}
        for r in session_results:
            assert r["error"] is None, r["error"]
        for r in session_results[1:]:
            m = r["metrics"]
            # the slot held this conversation's prefix: only the new message is evaluated
            assert m["cache_n"] / (m["cache_n"] + m["prompt_n"]) >= 0.5, m

    # A barge-in in session 0 while session 1 generates: confirmed idle on slot 0.
    other = asyncio.create_task(turn(client, sids[1], "Tell me a long story about the sea.",
                                     max_sentences=4))
    lines = await turn(client, sids[0], "Tell me about the history of bicycles.",
                       interrupt_after_audio=True, max_sentences=4)
    await other
    idle = [line["event"] for line in lines
            if line["type"] == "event" and line["event"]["event"] == "slot_idle"]
    assert lines[-1]["interrupted"] is True
    assert idle and idle[0]["confirmed"] is True, idle

"""serve's supervision of the managed llama-server: a failed turn in any session has it
checked once, a dead one is restarted (counted in /metrics, logged) and the next turn of
every session works.

Unit tests: ``SharedCheck`` with a stand-in supervisor, and the app's wiring with an LLM
URL where nothing listens. Integration: the REAL llama-server killed by pid (SIGKILL) under
two sessions, restarted by the real ``Supervisor`` from its state folder.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from test_web import FakeAsr, FakeTts

from pipeline.llm_client import LlmClient
from services.assistant import Assistant
from services.server_check import free_port
from services.supervisor import SharedCheck, Supervisor
from services.web import STATE, create_app


class StandIn(Supervisor):
    """Says the server died and was restarted, after ``delay`` seconds."""

    def __init__(self, delay: float = 0.05) -> None:
        super().__init__("http://127.0.0.1:1")
        self.delay, self.calls = delay, 0

    async def check_async(self) -> str | None:
        self.calls += 1
        await asyncio.sleep(self.delay)
        self.restarts += 1
        return "llama-server was killed by SIGKILL; restarted it"


async def test_many_failed_turns_share_one_check_and_turns_wait_for_it() -> None:
    lines: list[str] = []
    stand_in = StandIn(delay=0.2)
    check = SharedCheck(stand_in, lines.append)
    for _ in range(3):  # three sessions fail at once
        check.turn_failed()
    start = time.monotonic()
    await check.ready()  # a fourth session's next turn waits for the restart
    assert time.monotonic() - start >= 0.15
    assert stand_in.calls == 1 and check.checks == 1
    assert lines == ["llama-server was killed by SIGKILL; restarted it"]
    check.turn_failed()  # a later failure is checked again
    await check.ready()
    assert stand_in.calls == 2
    await check.ready()  # nothing running: returns at once


async def test_a_server_that_answers_is_not_counted_as_restarted() -> None:
    class Alive(StandIn):
        async def check_async(self) -> str | None:
            self.calls += 1
            return None

    lines: list[str] = []
    check = SharedCheck(Alive(), lines.append)
    check.turn_failed()
    await check.ready()
    assert lines == [] and check.checks == 1


async def test_a_failed_turn_in_serve_runs_the_check_and_metrics_count_the_restart(
        caplog: pytest.LogCaptureFixture) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens: every turn fails
    llm = LlmClient(dead)
    await llm.__aenter__()
    stand_in = StandIn()
    assistant = Assistant(FakeAsr(), FakeTts(), llm, dead)  # type: ignore[arg-type]
    caplog.set_level(logging.WARNING, "services.supervisor")
    try:
        app = create_app(assistant, supervisor=stand_in)
        async with TestClient(TestServer(app)) as client:
            sid = (await (await client.post("/v1/sessions")).json())["id"]
            resp = await client.post(f"/v1/sessions/{sid}/turns", json={"text": "hi"})
            result = [json.loads(raw) async for raw in resp.content][-1]
            assert result["type"] == "result" and result["error"]
            await app[STATE].llm_ready()
            metrics = await (await client.get("/metrics")).text()
    finally:
        await llm.close()
    assert stand_in.calls == 1
    assert "voice_llm_llm_restarts_total 1.0" in metrics
    assert "killed by SIGKILL; restarted it" in caplog.text


# --- the real server, killed ---------------------------------------------------------------
@pytest.fixture
def managed_server(tmp_path: Path) -> Any:
    from services import models
    from services.errors import UserError
    from services.llama_server import LlamaServer, ServerOptions

    try:
        models.llama_server_binary()
        models.llm_model()
    except UserError as e:
        pytest.skip(f"real llama-server not available: {e}")
    server = LlamaServer(tmp_path / "state")
    info = server.start(ServerOptions(port=free_port(), parallel=2, ctx=4096), quiet=True)
    try:
        yield server, info
    finally:
        LlamaServer(tmp_path / "state").stop()  # the restarted one, recorded in the same folder


@pytest.fixture
async def supervised(managed_server: Any) -> AsyncIterator[tuple[TestClient[Any, Any], Any]]:
    server, info = managed_server
    llm = LlmClient(info.url)
    await llm.__aenter__()
    assistant = Assistant(FakeAsr(), FakeTts(), llm, info.url)  # type: ignore[arg-type]
    app = create_app(assistant, slots=2,
                     supervisor=Supervisor(info.url, state_dir=server.state_dir))
    try:
        async with TestClient(TestServer(app)) as client:
            yield client, managed_server
    finally:
        await llm.close()


async def text_turn(client: TestClient[Any, Any], sid: str, text: str) -> dict[str, Any]:
    resp = await client.post(f"/v1/sessions/{sid}/turns",
                             json={"text": text, "max_sentences": 1})
    assert resp.status == 200
    result: dict[str, Any] = [json.loads(raw) async for raw in resp.content][-1]
    return result


@pytest.mark.integration
async def test_the_real_server_killed_by_pid_is_restarted_and_every_session_goes_on(
        supervised: tuple[TestClient[Any, Any], Any]) -> None:
    client, (server, info) = supervised
    sids = [(await (await client.post("/v1/sessions")).json())["id"] for _ in range(2)]
    for sid in sids:
        assert (await text_turn(client, sid, "Say hello."))["error"] is None
    os.kill(info.pid, signal.SIGKILL)
    for _ in range(100):  # reap it (it is this process's child), as a dead server is
        if server.returncode() is not None:
            break
        await asyncio.sleep(0.05)
    failed = await text_turn(client, sids[0], "Are you there?")
    assert failed["error"], failed  # the turn that met the dead server fails, in one line
    # Session 1's next turn waits for the restart the failure started, then works.
    for sid in [sids[1], sids[0]]:
        result = await text_turn(client, sid, "Say hello again.")
        assert result["error"] is None, result["error"]
    metrics = await (await client.get("/metrics")).text()
    assert "voice_llm_llm_restarts_total 1.0" in metrics
    new_pid = int(server.pid_path.read_text())
    assert new_pid != info.pid
    history = (await (await client.get(f"/v1/sessions/{sids[1]}")).json())["history"]
    assert len(history) == 4  # the session's history went on across the restart

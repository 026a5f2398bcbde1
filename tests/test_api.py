"""serve's machine API (/v1/sessions), slots, /metrics, API key and limits.

aiohttp's test client against the real app with fake ASR/TTS and the fake llama-server
(real HTTP); a two-slot variant of the fake shows barge-in waiting on its own slot only.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from fake_llm import FakeLlm, Reply
from test_web import REPLY, TTS_RATE, FakeAsr, FakeTts, tokens, wav_bytes

from pipeline.llm_client import LlmClient
from services.api import AUDIO_CHUNK
from services.api_slots import Lease, QueueTimeout, SlotPool
from services.assistant import Assistant
from services.web import STATE, create_app

UPLOAD_LIMIT = 64 * 1024
KEY = "sekrit"


class TwoSlotFake(FakeLlm):
    """Slot 1 belongs to someone else and is always busy; ours is slot 0."""

    async def _slots(self, request: web.Request) -> web.Response:
        return web.json_response([{"id": 0, "is_processing": self.is_processing},
                                  {"id": 1, "is_processing": True}])


@dataclass
class Api:
    client: TestClient[Any, Any]
    fake: FakeLlm

    @property
    def state(self) -> Any:
        return self.client.server.app[STATE]

    async def create(self, **headers: str) -> str:
        resp = await self.client.post("/v1/sessions", headers=headers)
        assert resp.status == 201, await resp.text()
        session_id: str = (await resp.json())["id"]
        return session_id

    async def turn(self, session_id: str, text: str = "How do I sleep better?",
                   on_line: Callable[[dict[str, Any]], Any] | None = None,
                   **options: Any) -> list[dict[str, Any]]:
        resp = await self.client.post(f"/v1/sessions/{session_id}/turns",
                                      json={"text": text, **options})
        assert resp.status == 200, await resp.text()
        assert resp.content_type == "application/x-ndjson"
        lines = []
        async for raw in resp.content:
            line = json.loads(raw)
            lines.append(line)
            if on_line is not None:
                await on_line(line)
        return lines


def make_app_fixture(fake_cls: type[FakeLlm] = FakeLlm, **app_options: Any
                     ) -> Callable[[], AsyncIterator[Api]]:
    async def fixture() -> AsyncIterator[Api]:
        async with fake_cls(Reply(tokens=tokens(REPLY), token_delay=0.005)) as fake:
            llm = LlmClient(fake.url)
            await llm.__aenter__()
            assistant = Assistant(FakeAsr(), FakeTts(0.5), llm, fake.url)  # type: ignore[arg-type]
            app = create_app(assistant, max_upload_bytes=UPLOAD_LIMIT, max_utterance_s=2.0,
                             **app_options)
            try:
                async with TestClient(TestServer(app)) as client:
                    yield Api(client, fake)
            finally:
                await llm.close()
    return fixture


api_app = pytest.fixture(make_app_fixture())
slotted = pytest.fixture(make_app_fixture(slots=2, idle_lease_s=60.0, queue_timeout_s=0.3,
                                          max_sessions=3))
keyed = pytest.fixture(make_app_fixture(api_key=KEY))
two_slot_fake = pytest.fixture(make_app_fixture(TwoSlotFake, slots=1))


def types(lines: list[dict[str, Any]]) -> list[str]:
    return [line["type"] for line in lines]


# --- sessions and streamed turns ------------------------------------------------------
async def test_text_turn_streams_events_sentences_audio_and_the_result_last(
        api_app: Api) -> None:
    sid = await api_app.create()
    lines = await api_app.turn(sid)
    kinds = types(lines)
    assert kinds[-1] == "result"
    assert kinds.index("sentence") < kinds.index("audio") < kinds.index("result")
    events = [line["event"]["stage"] + "." + line["event"]["event"]
              for line in lines if line["type"] == "event"]
    assert events[0] == "turn.start" and events[-1] == "turn.end"
    # the audio arrives as the turn happens, before the LLM has finished
    assert kinds.index("audio") < next(i for i, line in enumerate(lines)
                                       if line["type"] == "event"
                                       and line["event"]["event"] == "end"
                                       and line["event"]["stage"] == "llm")
    audio = [line for line in lines if line["type"] == "audio"]
    assert {a["sample_rate"] for a in audio} == {TTS_RATE}
    pcm = b"".join(base64.b64decode(a["data"]) for a in audio)
    assert len(pcm) == 2 * sum(a["samples"] for a in audio) > 0
    assert max(a["samples"] for a in audio) <= AUDIO_CHUNK  # no line is huge
    result = lines[-1]
    assert result["reply"] == REPLY and result["error"] is None
    assert result["metrics"]["first_audio_ms"] is not None

    resp = await api_app.client.get(f"/v1/sessions/{sid}")
    body = await resp.json()
    assert body["turns"] == 1
    assert body["history"][-1] == {"role": "assistant", "content": REPLY}


async def test_wav_turn_gives_a_transcript_and_options_apply(api_app: Api) -> None:
    sid = await api_app.create()
    resp = await api_app.client.post(f"/v1/sessions/{sid}/turns?max_sentences=1&mode=serial",
                                     data=wav_bytes(), headers={"Content-Type": "audio/wav"})
    assert resp.status == 200
    lines = [json.loads(raw) async for raw in resp.content]
    assert next(line for line in lines if line["type"] == "transcript")["text"] == \
        FakeAsr.text
    assert types(lines).count("sentence") == 1
    assert lines[-1]["mode"] == "serial"
    assert lines[-1]["metrics"]["reply_sentences"] == 1


async def test_max_tokens_is_sent_to_the_llm(api_app: Api) -> None:
    sid = await api_app.create()
    await api_app.turn(sid, max_tokens=7)
    assert api_app.fake.requests[-1].body["max_tokens"] == 7


async def test_delete_forgets_the_session(api_app: Api) -> None:
    sid = await api_app.create()
    await api_app.turn(sid)
    resp = await api_app.client.delete(f"/v1/sessions/{sid}")
    assert resp.status == 200
    for call in (api_app.client.get(f"/v1/sessions/{sid}"),
                 api_app.client.post(f"/v1/sessions/{sid}/turns", json={"text": "hi"})):
        resp = await call
        assert resp.status == 404
        assert (await resp.json())["kind"] == "unknown_session"


async def test_sessions_keep_separate_histories(api_app: Api) -> None:
    a, b = await api_app.create(), await api_app.create()
    await api_app.turn(a, "first question")
    await api_app.turn(b, "another question")
    hist_a = (await (await api_app.client.get(f"/v1/sessions/{a}")).json())["history"]
    hist_b = (await (await api_app.client.get(f"/v1/sessions/{b}")).json())["history"]
    assert hist_a[0]["content"] == "first question"
    assert hist_b[0]["content"] == "another question" and len(hist_b) == 2


async def test_a_client_hanging_up_mid_turn_hangs_up_on_the_llm(api_app: Api) -> None:
    api_app.fake.reply = Reply(tokens=tokens(REPLY * 4), token_delay=0.05)
    sid = await api_app.create()
    resp = await api_app.client.post(f"/v1/sessions/{sid}/turns", json={"text": "talk"})
    async for raw in resp.content:
        if json.loads(raw)["type"] == "audio":
            break
    resp.close()  # the machine goes away mid-reply
    await api_app.fake.wait_disconnect()
    session = api_app.state.api_sessions[sid]
    for _ in range(200):
        if not session.runner.busy:
            break
        await asyncio.sleep(0.01)
    heard = session.runner.conversation.history[-1]["content"]
    assert heard.endswith("…") and len(heard) < len(REPLY * 4)


async def test_interrupt_confirms_idle_on_its_own_slot(two_slot_fake: Api) -> None:
    api = two_slot_fake
    api.fake.reply = Reply(tokens=tokens(REPLY * 4), token_delay=0.05)
    sid = await api.create()

    async def interrupt_on_audio(line: dict[str, Any]) -> None:
        if line["type"] == "audio":
            await api.client.post(f"/v1/sessions/{sid}/interrupt")

    lines = await api.turn(sid, on_line=interrupt_on_audio)
    assert api.fake.requests[-1].body["id_slot"] == 0
    idle = [line["event"] for line in lines if line["type"] == "event"
            and line["event"]["event"] == "slot_idle"]
    # slot 1 is busy throughout: before, "any slot busy" meant never confirmed
    assert idle and idle[0]["confirmed"] is True
    assert lines[-1]["interrupted"] is True


async def test_a_client_that_played_less_than_it_got_cuts_the_history_there(
        api_app: Api) -> None:
    # The API hands audio over as fast as Piper makes it, so the turn is often over
    # before the client's user interrupts its own playback: the history must still
    # keep only what was played.
    sid = await api_app.create()
    lines = await api_app.turn(sid)
    assert lines[-1]["interrupted"] is False
    per_sentence = int(0.5 * TTS_RATE)  # FakeTts(0.5)
    resp = await api_app.client.post(f"/v1/sessions/{sid}/interrupt",
                                     json={"played_samples": per_sentence + 5000})
    assert resp.status == 200
    assert await resp.json() == {"interrupted": False, "cut": True,
                                 "played_samples": per_sentence + 5000}
    described = await (await api_app.client.get(f"/v1/sessions/{sid}")).json()
    heard = "Sleep at the same time every day. Keep your"  # 5000/11025 of the 2nd sentence
    assert described["history"][-1]["content"] == heard + "…"
    assert described["records"][-1]["heard"] == heard
    # having played nothing of it after all: the pair goes
    nothing = await api_app.client.post(f"/v1/sessions/{sid}/interrupt",
                                        json={"played_samples": 0})
    assert (await nothing.json())["cut"] is True
    described = await (await api_app.client.get(f"/v1/sessions/{sid}")).json()
    assert described["history"] == [] and described["records"][-1]["heard"] == ""
    # having played it all cuts nothing more
    again = await api_app.client.post(f"/v1/sessions/{sid}/interrupt",
                                      json={"played_samples": 10 * per_sentence})
    assert (await again.json())["cut"] is False


async def test_a_reply_heard_for_fewer_than_four_words_is_not_kept(api_app: Api) -> None:
    sid = await api_app.create()
    await api_app.turn(sid)
    per_sentence = int(0.5 * TTS_RATE)  # FakeTts(0.5); "Sleep at the same time every day."
    resp = await api_app.client.post(f"/v1/sessions/{sid}/interrupt",
                                     json={"played_samples": per_sentence * 14 // 33})
    assert (await resp.json())["cut"] is True
    described = await (await api_app.client.get(f"/v1/sessions/{sid}")).json()
    # "Sleep at the" was heard: SmolLM2 copies such fragments, so the pair goes
    assert described["records"][-1]["heard"] == "Sleep at the"
    assert described["history"] == []


async def test_played_samples_told_mid_turn_cut_the_result_it_ends_with(
        two_slot_fake: Api) -> None:
    api = two_slot_fake
    api.fake.reply = Reply(tokens=tokens(REPLY * 4), token_delay=0.05)
    sid = await api.create()
    answers = []

    async def interrupt_on_audio(line: dict[str, Any]) -> None:
        if line["type"] == "audio" and not answers:
            resp = await api.client.post(f"/v1/sessions/{sid}/interrupt",
                                         json={"played_samples": 0})
            answers.append(await resp.json())

    lines = await api.turn(sid, on_line=interrupt_on_audio)
    assert answers == [{"interrupted": True, "cut": None, "played_samples": 0}]
    assert lines[-1]["interrupted"] is True and lines[-1]["heard"] == ""
    # none of it was heard: the pair is not kept (a lone "…" is what SmolLM2 copies)
    assert api.state.api_sessions[sid].runner.conversation.history == []


@pytest.mark.parametrize("body, kind", [({"played_samples": -1}, "bad_option"),
                                        ({"played_samples": "many"}, "bad_option"),
                                        ([1], "bad_json")])
async def test_a_bad_played_report_is_a_400(api_app: Api, body: Any, kind: str) -> None:
    sid = await api_app.create()
    resp = await api_app.client.post(f"/v1/sessions/{sid}/interrupt", json=body)
    assert resp.status == 400
    assert (await resp.json())["kind"] == kind


async def test_a_played_report_that_is_not_json_is_a_415(api_app: Api) -> None:
    sid = await api_app.create()
    resp = await api_app.client.post(f"/v1/sessions/{sid}/interrupt", data=b"12",
                                     headers={"Content-Type": "text/plain"})
    assert resp.status == 415


# --- slots and the queue ----------------------------------------------------------------
async def test_each_session_gets_its_own_slot_and_keeps_it(slotted: Api) -> None:
    a, b = await slotted.create(), await slotted.create()
    for sid in (a, b, a, b):
        lines = await slotted.turn(sid)
        assert lines[0]["type"] == "slot"
    slots = [r.body["id_slot"] for r in slotted.fake.requests]
    assert slots == [0, 1, 0, 1]


async def test_more_sessions_than_slots_queue_then_time_out_then_get_a_freed_slot(
        slotted: Api) -> None:
    a, b, c = await slotted.create(), await slotted.create(), await slotted.create()
    await slotted.turn(a)
    await slotted.turn(b)
    lines = await slotted.turn(c)  # both slots held by idle sessions within their lease
    assert types(lines) == ["queued", "error"]
    assert lines[0]["position"] == 1 and lines[1]["kind"] == "queue_timeout"
    await slotted.client.delete(f"/v1/sessions/{a}")
    lines = await slotted.turn(c)
    assert lines[0] == {"type": "slot", "id_slot": 0, "queue_wait_ms": 0.0}
    assert lines[-1]["type"] == "result"


async def test_too_many_sessions_is_429(slotted: Api) -> None:
    for _ in range(3):
        await slotted.create()
    resp = await slotted.client.post("/v1/sessions")
    assert resp.status == 429
    assert (await resp.json())["kind"] == "too_many_sessions"


async def test_slot_pool_reclaims_the_longest_idle_slot_after_its_lease() -> None:
    now = [0.0]
    pool = SlotPool(1, idle_lease_s=10.0, clock=lambda: now[0])
    first, second = Lease("a"), Lease("b")
    assert await pool.acquire(first) == 0.0 and first.slot == 0
    pool.begin(first)
    with pytest.raises(QueueTimeout):
        await pool.acquire(second, 0.0)
    pool.end(first)
    now[0] = 11.0  # idle past its lease: a waiting conversation may take the slot
    assert pool.try_acquire(second) and second.slot == 0
    assert first.slot is None and first.reclaimed == 1


async def test_a_waiter_gets_the_slot_the_moment_it_is_released() -> None:
    pool = SlotPool(1)
    first, second = Lease("a"), Lease("b")
    await pool.acquire(first)
    waiter = asyncio.create_task(pool.acquire(second, 5.0))
    await asyncio.sleep(0.01)
    assert pool.position(second) == 1
    pool.release(first)
    waited = await asyncio.wait_for(waiter, 1.0)
    assert second.slot == 0 and waited < 0.5


async def test_a_conversation_closed_while_queued_never_takes_a_slot() -> None:
    pool = SlotPool(1)
    first, second = Lease("a"), Lease("b")
    await pool.acquire(first)
    waiter = asyncio.create_task(pool.acquire(second, 5.0))
    await asyncio.sleep(0.01)
    pool.release(second)  # its tab closed while it waited
    with pytest.raises(QueueTimeout):
        await asyncio.wait_for(waiter, 2.0)
    assert pool.holders == {0: first} and pool.waiting == []


# --- bad input ---------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "status", "kind"), [
    ({"data": b"hello", "headers": {"Content-Type": "text/plain"}}, 415,
     "unsupported_media_type"),
    ({"json": {"text": "hi", "mode": "fast"}}, 400, "bad_option"),
    ({"json": {"text": "hi", "max_tokens": 0}}, 400, "bad_option"),
    ({"json": {"text": "hi", "max_sentences": "many"}}, 400, "bad_option"),
    ({"json": {"text": ""}}, 400, "bad_text"),
    ({"data": b"{not json", "headers": {"Content-Type": "application/json"}}, 400,
     "bad_json"),
    ({"data": b"", "headers": {"Content-Type": "audio/wav"}}, 400, "empty_body"),
    ({"data": b"RIFF....WAVEjunk", "headers": {"Content-Type": "audio/wav"}}, 400,
     "bad_audio"),
    ({"data": b"\0" * (UPLOAD_LIMIT + 1), "headers": {"Content-Type": "audio/wav"}}, 413,
     "upload_too_large"),
    ({"data": wav_bytes(3.0, rate=8000), "headers": {"Content-Type": "audio/wav"}}, 413,
     "utterance_too_long"),
])
async def test_bad_turns_get_a_4xx_with_one_line_and_the_session_survives(
        api_app: Api, kwargs: dict[str, Any], status: int, kind: str) -> None:
    sid = await api_app.create()
    resp = await api_app.client.post(f"/v1/sessions/{sid}/turns", **kwargs)
    assert resp.status == status
    body = await resp.json()
    assert body["kind"] == kind and "\n" not in body["error"]
    lines = await api_app.turn(sid)
    assert lines[-1]["error"] is None


async def test_a_second_turn_while_one_runs_is_409(api_app: Api) -> None:
    api_app.fake.reply = Reply(tokens=tokens(REPLY), token_delay=0.05)
    sid = await api_app.create()
    first = asyncio.create_task(api_app.turn(sid))
    await api_app.fake.wait_request()
    resp = await api_app.client.post(f"/v1/sessions/{sid}/turns", json={"text": "again"})
    assert resp.status == 409
    assert (await first)[-1]["error"] is None


# --- /metrics and the key ------------------------------------------------------------------
async def test_metrics_scrape_counts_turns_and_latencies(api_app: Api) -> None:
    sid = await api_app.create()
    await api_app.turn(sid)
    await api_app.turn(sid)
    resp = await api_app.client.get("/metrics")
    assert resp.status == 200 and resp.content_type.startswith("text/plain")
    text = await resp.text()
    assert 'voice_llm_turns_total{interface="api",mode="streamed",outcome="ok"} 2.0' in text
    assert 'voice_llm_first_audio_seconds_count{interface="api"} 2.0' in text
    assert 'voice_llm_sessions{interface="api"} 1.0' in text
    assert 'voice_llm_prompt_tokens_total{kind="cached"}' in text  # turn 2 counted


async def test_api_key_guards_everything_but_the_page_and_health(keyed: Api) -> None:
    client = keyed.client
    for path in ("/", "/health"):
        assert (await client.get(path)).status == 200
    for method, path in (("POST", "/v1/sessions"), ("GET", "/metrics"),
                         ("POST", "/api/reset"), ("GET", "/ws")):
        resp = await client.request(method, path)
        assert resp.status == 401, path
        assert (await resp.json())["kind"] == "unauthorized"
    resp = await client.post("/v1/sessions", headers={"Authorization": "Bearer wrong"})
    assert resp.status == 401
    sid = await keyed.create(Authorization=f"Bearer {KEY}")
    assert sid
    ws = await client.ws_connect(f"/ws?key={KEY}")
    hello = await ws.receive_json()
    assert hello["type"] in ("hello", "audio.format")  # the session is open
    await ws.close()


# --- the WebSocket's limits ----------------------------------------------------------------
async def test_ws_messages_too_fast_are_dropped_with_one_error() -> None:
    fixture = make_app_fixture(ws_max_messages_per_s=5)()
    api = await fixture.__anext__()
    try:
        ws = await api.client.ws_connect("/ws")
        for _ in range(20):
            await ws.send_json({"type": "audio.cancel"})
        errors = []
        while True:
            try:
                msg = await ws.receive(timeout=0.3)
            except TimeoutError:
                break
            if msg.type == aiohttp.WSMsgType.TEXT and json.loads(msg.data)["type"] == "error":
                errors.append(json.loads(msg.data)["message"])
        assert len(errors) == 1 and "too many messages" in errors[0]
        await ws.close()
    finally:
        with pytest.raises(StopAsyncIteration):
            await fixture.__anext__()


async def test_ws_sessions_share_the_slot_pool(slotted: Api) -> None:
    ws = await slotted.client.ws_connect("/ws")
    await ws.send_json({"type": "text", "text": "hello"})
    while True:
        raw = await ws.receive()
        if raw.type == aiohttp.WSMsgType.TEXT and json.loads(raw.data)["type"] == \
                "turn.result":
            break
    assert slotted.fake.requests[-1].body["id_slot"] == 0
    assert json.loads(raw.data)["id_slot"] == 0  # the tab is told its slot
    sid = await slotted.create()
    await slotted.turn(sid)
    assert slotted.fake.requests[-1].body["id_slot"] == 1
    await ws.close()


# --- the rest of the bad inputs --------------------------------------------------------------
@pytest.mark.parametrize("method, suffix", [("GET", ""), ("DELETE", ""),
                                            ("POST", "/turns"), ("POST", "/interrupt")])
async def test_an_unknown_session_id_is_404_on_every_route(api_app: Api, method: str,
                                                           suffix: str) -> None:
    resp = await api_app.client.request(method, f"/v1/sessions/nope{suffix}",
                                        json={"text": "hi"})
    assert resp.status == 404
    body = await resp.json()
    assert body["kind"] == "unknown_session" and "'nope'" in body["error"]


async def test_a_text_turn_over_the_limit_is_413(api_app: Api) -> None:
    sid = await api_app.create()
    resp = await api_app.client.post(f"/v1/sessions/{sid}/turns", json={"text": "a" * 2001})
    assert resp.status == 413
    assert (await resp.json())["kind"] == "text_too_long"
    assert (await api_app.turn(sid))[-1]["error"] is None


async def test_a_tab_beyond_max_sessions_is_refused_with_429(slotted: Api) -> None:
    for _ in range(3):
        await slotted.create()
    resp = await slotted.client.get("/ws")  # refused before the WebSocket upgrade
    assert resp.status == 429
    assert (await resp.json())["kind"] == "too_many_sessions"
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        await slotted.client.ws_connect("/ws")
    assert refused.value.status == 429


async def test_a_ws_message_far_over_the_limit_closes_the_socket_as_too_big(
        api_app: Api) -> None:
    ws = await api_app.client.ws_connect("/ws")
    await ws.send_bytes(b"\0" * (2 * UPLOAD_LIMIT + 2048))  # beyond the one-line-error zone
    closing = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    while (await ws.receive(timeout=5)).type not in closing:
        pass
    assert ws.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
    for _ in range(100):  # the session's task ends with its socket
        if not api_app.state.sessions:
            break
        await asyncio.sleep(0.01)
    assert api_app.state.sessions == {}


# --- the HTTP rate limit ---------------------------------------------------------------------
limited = pytest.fixture(make_app_fixture(rate_limit_per_minute=3))


async def test_over_the_rate_limit_is_429_with_retry_after_per_client(limited: Api) -> None:
    client = limited.client
    sid = await limited.create()
    await limited.turn(sid)
    await limited.turn(sid)  # 3 counted: the create and two turns
    resp = await client.post(f"/v1/sessions/{sid}/turns", json={"text": "again"})
    assert resp.status == 429
    body = await resp.json()
    assert body["kind"] == "rate_limited" and "\n" not in body["error"]
    assert 1 <= int(resp.headers["Retry-After"]) == body["retry_after_s"] <= 60
    for refused in ((await client.post("/v1/sessions")), (await client.get("/ws"))):
        assert refused.status == 429  # a new session or tab counts too
    # Never limited: reading, interrupting and forgetting; and another client has its own.
    assert (await client.get(f"/v1/sessions/{sid}")).status == 200
    assert (await client.post(f"/v1/sessions/{sid}/interrupt")).status == 200
    assert (await client.post("/v1/sessions",
                              headers={"Authorization": "Bearer other"})).status == 201
    assert (await client.delete(f"/v1/sessions/{sid}")).status == 200
    metrics = await (await client.get("/metrics")).text()
    assert 'voice_llm_errors_total{kind="rate_limited"} 3.0' in metrics


def test_rate_limiter_window_slides_and_retry_after_is_exact() -> None:
    from services.api_rate import RateLimiter, client_id, retry_after_header

    now = [0.0]
    rate = RateLimiter(2, clock=lambda: now[0])
    assert rate.check("a") is None
    now[0] = 10.0
    assert rate.check("a") is None
    now[0] = 20.0
    assert rate.check("a") == 40.0  # the request at t=0 leaves the window at t=60
    assert rate.check("b") is None  # clients do not share a budget
    now[0] = 59.9
    assert rate.check("a") == pytest.approx(0.1)  # refused requests were not counted
    assert retry_after_header(0.1) == "1"
    now[0] = 60.0
    assert rate.check("a") is None
    now[0] = 1000.0
    rate._sweep(now[0])
    assert rate.clients == {}  # idle clients are forgotten
    assert client_id("Bearer k", "1.2.3.4") == client_id("Bearer k", "5.6.7.8")
    assert client_id("", "1.2.3.4") == "addr:1.2.3.4"
    with pytest.raises(ValueError):
        RateLimiter(0)

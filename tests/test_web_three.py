"""Three conversations at once on one `serve`: two browser tabs (headless Chromium, the page's
real microphone path) and one API client, against the REAL llama-server with three slots
(`-np 3`), real Whisper and Piper.

Each conversation speaks two turns, then all three ask for a long story at the same moment
and barge in on it. Asserted: each keeps its own slot for life (three distinct slots), its
KV prefix survives the others' turns (on turns 2+ the whole previous prompt is in cache_n,
and cache_n / prompt tokens is as high as alone: at least ``CACHE_REUSE_MIN``), every
barge-in closes its LLM stream and its slot's idle check runs on its own slot; at least one
is confirmed idle while another conversation's slot is still generating (a poller of
llama-server's /slots sees that), which the any-slot check of old could not confirm. Not
all are: under this load a tab's hung-up slot was seen busy for up to 1.2 s, past the
turn's slot-idle wait (1.0 s then, 3 s now) (docs/results.md); in the end no slot is busy.

``VOICE_LLM_ALONE=1`` first runs each conversation alone (the reference figure) and prints
both; the figures are printed with ``-s`` either way.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from test_web_browser import SAMPLES, Cdp, chromium, chromium_bin, free_port, serving_page

__all__ = ["chromium", "chromium_bin"]  # fixtures shared with test_web_browser

pytestmark = [pytest.mark.browser, pytest.mark.integration,
              pytest.mark.asyncio(loop_scope="module")]

SLOTS = 3
# Each conversation alone (VOICE_LLM_ALONE=1, docs/results.md): 0.883 (tabs) and 0.859 (API)
# on turn 2, 0.90 on turn 3; three at once gave the same. A slot that lost the prefix keeps
# at most the shared system prompt, far below.
CACHE_REUSE_MIN = 0.8
STORY = "Tell me a long story about a lighthouse keeper and the sea."
API_WAVS = [SAMPLES / "03_sky_blue.wav", SAMPLES / "04_cup_of_tea.wav"]
RESULTS = "voiceLlm.log.filter(m => m.type === 'turn.result')"


@pytest.fixture(scope="module")
def three_slot_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from services import models
    from services.errors import UserError
    from services.llama_server import LlamaServer, ServerOptions

    try:
        models.llama_server_binary()
        models.llm_model()
    except UserError as e:
        pytest.skip(f"real llama-server not available: {e}")
    server = LlamaServer(Path(tmp_path_factory.mktemp("three-slot-state")))
    info = server.start(ServerOptions(port=free_port(), parallel=SLOTS, ctx=2048 * SLOTS),
                        quiet=True)
    try:
        yield info
    finally:
        server.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def service(three_slot_server: Any) -> AsyncIterator[str]:
    async with serving_page(three_slot_server.url, slots=SLOTS) as url:
        yield url


# --- the three clients ------------------------------------------------------------------
class Tab:
    """One browser tab on the page: its DevTools connection and its conversation."""

    def __init__(self, name: str, cdp: Cdp) -> None:
        self.name, self.cdp = name, cdp

    async def spoken_turn(self, n: int) -> dict[str, Any]:
        """Turn ``n`` (1-based): the fake microphone speaks the WAV; hands-free endpoint."""
        page = self.cdp
        if n > 1:  # mute, then unmute: the fake device plays the WAV from its start again
            await page.click("#start")
            await page.wait_for("!voiceLlm.micOn", 5, f"{self.name}: the microphone to stop")
        await page.click("#start")
        await page.wait_for("voiceLlm.micOn", 10, f"{self.name}: the microphone")
        result: dict[str, Any] = await page.wait_for(f"{RESULTS}[{n - 1}]", 180,
                                                     f"{self.name}: turn {n}'s result")
        await page.wait_for("voiceLlm.state === 'listening'", 30, f"{self.name}: listening")
        return result

    async def barge_in_turn(self, n: int, start: asyncio.Barrier) -> tuple[dict[str, Any],
                                                                           float, float]:
        """A typed long question, interrupted with the button once the reply is audible."""
        page = self.cdp
        await page.click("#start")  # mute, so the fake microphone cannot barge in itself
        await page.wait_for("!voiceLlm.micOn", 5, f"{self.name}: the microphone to stop")
        await page.click("#typed-text")
        await page.call("Input.insertText", text=STORY)
        await start.wait()
        for kind in ("keyDown", "keyUp"):
            await page.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                            windowsVirtualKeyCode=13, text="\r" if kind == "keyDown" else "")
        await page.wait_for("voiceLlm.state === 'speaking'", 120, f"{self.name}: speaking")
        pressed = time.monotonic()
        await page.click("#interrupt")
        result: dict[str, Any] = await page.wait_for(f"{RESULTS}[{n - 1}]", 60,
                                                     f"{self.name}: the interrupted turn")
        done = time.monotonic()
        result["events"] = await page.js(
            f"voiceLlm.log.filter(m => m.type === 'event' && m.event.turn === {n})"
            ".map(m => m.event)")
        return result, pressed, done


class ApiClient:
    def __init__(self, http: aiohttp.ClientSession, base: str) -> None:
        self.http, self.base, self.id = http, base, ""

    async def open(self) -> None:
        async with self.http.post(f"{self.base}v1/sessions") as resp:
            assert resp.status == 201
            self.id = (await resp.json())["id"]

    async def spoken_turn(self, n: int) -> dict[str, Any]:
        data = API_WAVS[(n - 1) % len(API_WAVS)].read_bytes()
        async with self.http.post(f"{self.base}v1/sessions/{self.id}/turns", data=data,
                                  headers={"Content-Type": "audio/wav"}) as resp:
            assert resp.status == 200
            lines = [json.loads(raw) async for raw in resp.content]
        result: dict[str, Any] = lines[-1]
        assert result["type"] == "result", lines[-3:]
        return result

    async def barge_in_turn(self, n: int, start: asyncio.Barrier) -> tuple[dict[str, Any],
                                                                           float, float]:
        await start.wait()
        pressed = 0.0
        events: list[dict[str, Any]] = []
        async with self.http.post(f"{self.base}v1/sessions/{self.id}/turns",
                                  json={"text": STORY}) as resp:
            assert resp.status == 200
            async for raw in resp.content:
                line = json.loads(raw)
                if line["type"] == "event":
                    events.append(line["event"])
                if line["type"] == "audio" and not pressed:
                    pressed = time.monotonic()
                    async with self.http.post(
                            f"{self.base}v1/sessions/{self.id}/interrupt") as r:
                        assert r.status == 200
        line["events"] = events
        return line, pressed, time.monotonic()


# --- what llama-server's slots did --------------------------------------------------------
class SlotWatch:
    """Polls /slots: (monotonic time, ids processing) every 20 ms while the barge-ins run."""

    def __init__(self, http: aiohttp.ClientSession, llm_url: str) -> None:
        self.http, self.url = http, llm_url
        self.samples: list[tuple[float, set[int]]] = []

    async def run(self) -> None:
        while True:
            async with self.http.get(f"{self.url}/slots") as resp:
                slots = await resp.json()
            self.samples.append((time.monotonic(),
                                 {s["id"] for s in slots if s.get("is_processing")}))
            await asyncio.sleep(0.02)

    def others_busy(self, mine: int, start: float, end: float) -> bool:
        return any(busy - {mine} for t, busy in self.samples if start <= t <= end)


def reuse(result: dict[str, Any]) -> float:
    m = result["metrics"]
    return float(m["cache_n"] / (m["cache_n"] + m["prompt_n"]))


async def open_tab(http: aiohttp.ClientSession, devtools: int, url: str, name: str
                   ) -> tuple[Cdp, aiohttp.ClientWebSocketResponse]:
    """A new tab in its own window (so neither tab is a hidden background tab)."""
    version: dict[str, Any] = {}
    for _ in range(100):  # Chromium takes a moment to open its DevTools port
        try:
            async with http.get(f"http://127.0.0.1:{devtools}/json/version") as resp:
                version = await resp.json()
            break
        except aiohttp.ClientError:
            await asyncio.sleep(0.1)
    async with http.ws_connect(version["webSocketDebuggerUrl"], max_msg_size=0) as browser:
        await browser.send_json({"id": 1, "method": "Target.createTarget",
                                 "params": {"url": url, "newWindow": True}})
        while "id" not in (reply := await browser.receive_json()):
            pass
    target = reply["result"]["targetId"]
    ws = await http.ws_connect(f"ws://127.0.0.1:{devtools}/devtools/page/{target}",
                               max_msg_size=0)
    cdp = Cdp(ws)
    await cdp.call("Runtime.enable")
    await cdp.call("Page.enable")
    await cdp.wait_for("window.voiceLlm && voiceLlm.connected", 20, f"{name}: the WebSocket")
    return cdp, ws


async def conversation(client: Tab | ApiClient, start: asyncio.Barrier
                       ) -> tuple[list[dict[str, Any]], tuple[dict[str, Any], float, float]]:
    spoken = [await client.spoken_turn(n) for n in (1, 2)]
    return spoken, await client.barge_in_turn(3, start)


async def test_two_tabs_and_an_api_client_keep_their_slots_caches_and_barge_ins(
        chromium: int, service: str, three_slot_server: Any, tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as http:
        tabs_ws = [await open_tab(http, chromium, service, f"tab {k}") for k in (1, 2)]
        tabs = [Tab(f"tab {k + 1}", cdp) for k, (cdp, _) in enumerate(tabs_ws)]
        for tab in tabs:
            await tab.cdp.click("input[value=auto]")
        api = ApiClient(http, service)
        await api.open()
        clients: list[Tab | ApiClient] = [*tabs, api]
        names = ["tab 1", "tab 2", "api"]

        if os.environ.get("VOICE_LLM_ALONE"):
            # Reference: one conversation at a time (still on its own slot), then forgotten.
            for name, client in zip(names, clients, strict=True):
                alone, _ = await conversation(client, asyncio.Barrier(1))
                print(f"alone {name}: cache reuse turn 2 {reuse(alone[1]):.3f}")
            # fresh conversations for the concurrent run
            async with http.delete(f"{service}v1/sessions/{api.id}") as resp:
                assert resp.status == 200  # its slot is free again at once
            for tab in tabs:
                await tab.cdp.call("Page.reload")
                await tab.cdp.wait_for("window.voiceLlm && voiceLlm.connected", 20, "reload")
                await tab.cdp.click("input[value=auto]")
            await api.open()

        watch = SlotWatch(http, three_slot_server.url)
        poller = asyncio.create_task(watch.run())
        try:
            start = asyncio.Barrier(len(clients))
            runs = await asyncio.gather(*(conversation(c, start) for c in clients))
        finally:
            poller.cancel()
        for tab in tabs:
            await tab.cdp.screenshot(tmp_path / f"{tab.name.replace(' ', '-')}.png")
        for cdp, ws in tabs_ws:
            cdp.reader.cancel()
            await ws.close()

    slots = []
    for name, (spoken, (barged, pressed, done)) in zip(names, runs, strict=True):
        turns = [*spoken, barged]
        for r in turns:
            assert r["error"] is None, (name, r["error"])
        assert all(r["transcript"].strip() for r in spoken), name
        mine = {r["id_slot"] for r in turns}
        assert len(mine) == 1 and None not in mine, (name, mine)  # one slot for life
        slot = mine.pop()
        slots.append(slot)
        figures = [round(reuse(r), 3) for r in turns[1:]]
        tokens = [(r["metrics"]["cache_n"], r["metrics"]["prompt_n"]) for r in turns]
        print(f"{name}: slot {slot}, cache reuse turns 2, 3 {figures}, (cache_n, prompt_n) "
              f"{tokens}, first audio {[r['metrics']['first_audio_ms'] for r in turns]} ms")
        for (cached, _), (before_cached, before_new) in zip(tokens[1:], tokens, strict=False):
            assert cached >= before_cached + before_new, (name, tokens)  # nothing evicted
        assert min(figures) >= CACHE_REUSE_MIN, (name, tokens)
        assert barged["interrupted"] is True, name
        idle = [e for e in barged["events"] if e["stage"] == "server"
                and e["event"] == "slot_idle"]
        assert idle, name
        assert any(e["stage"] == "llm" and e["event"] == "closed" for e in barged["events"])
        mine_busy = [round(t - pressed, 3) for t, busy in watch.samples
                     if pressed <= t <= done and slot in busy]
        barged["confirmed"] = idle[0]["confirmed"] is True
        barged["others_busy"] = watch.others_busy(slot, pressed, done)
        print(f"{name}: barge-in -> slot idle {barged['metrics']['bargein_to_slot_idle_ms']}"
              f" ms, confirmed {barged['confirmed']} ({idle[0].get('reason')}; own slot "
              f"last seen busy {mine_busy[-1:]} s after the press), another slot "
              f"generating meanwhile: {barged['others_busy']}")
    assert sorted(slots) == list(range(SLOTS))
    # Measured: with three conversations on two cores a tab's hung-up slot can stay busy
    # for more than the turn's slot-idle wait (1.0 s then, 3 s now) (docs/results.md), so not every
    # barge-in is confirmed in time. At least one must be, while another conversation's
    # slot was busy: the check is on its own slot, not on every slot.
    assert any(b["confirmed"] and b["others_busy"] for _, (b, _, _) in runs), \
        [(b["confirmed"], b["others_busy"]) for _, (b, _, _) in runs]
    async with aiohttp.ClientSession() as http, \
            http.get(f"{three_slot_server.url}/slots") as resp:
        assert not [s["id"] for s in await resp.json() if s.get("is_processing")]

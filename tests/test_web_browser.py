"""The page in real headless Chromium against the real service (llama-server, Whisper, Piper).

Chromium's fake microphone speaks ``samples/01_sleep_tips.wav`` once (``%noloop``); the
page is driven over the DevTools protocol with aiohttp's WebSocket client (no Playwright):
real clicks on the page's buttons, then the page's own state (``window.voiceLlm``) and DOM
are read back. Screenshots land in the test's tmp dir (paths printed with ``-s``).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from services.web import create_app

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
VOICE_WAV = SAMPLES / "01_sleep_tips.wav"

pytestmark = [pytest.mark.browser, pytest.mark.integration,
              pytest.mark.asyncio(loop_scope="module")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Cdp:
    """The few DevTools calls the test needs, over one page's WebSocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.pending: dict[int, asyncio.Future[Any]] = {}
        self.console: list[str] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            data = json.loads(msg.data)
            if "id" in data and data["id"] in self.pending:
                self.pending.pop(data["id"]).set_result(data)
            elif data.get("method") == "Runtime.consoleAPICalled":
                args = data["params"]["args"]
                self.console.append(" ".join(str(a.get("value", a.get("description")))
                                             for a in args))
            elif data.get("method") == "Runtime.exceptionThrown":
                self.console.append("exception: " + json.dumps(data["params"])[:500])

    async def call(self, method: str, **params: Any) -> Any:
        call_id = next(self.ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = fut
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        reply = await asyncio.wait_for(fut, 30)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    async def js(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression,
                                 returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, limit_s: float, what: str) -> Any:
        deadline = asyncio.get_running_loop().time() + limit_s
        while True:
            value = await self.js(expression)
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                state = await self.js("JSON.stringify({state: voiceLlm.state, "
                                      "stats: voiceLlm.stats, log: voiceLlm.log.slice(-8)})")
                raise AssertionError(f"timed out waiting for {what}; page: {state}; "
                                     f"console: {self.console[-10:]}")
            await asyncio.sleep(0.2)

    async def click(self, selector: str) -> None:
        """A real mouse click (a user gesture, which audio and the microphone need)."""
        box = await self.js(f"(() => {{ const r = document.querySelector({selector!r})"
                            ".getBoundingClientRect(); return [r.x + r.width / 2, "
                            "r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1],
                            button="left", clickCount=1)

    async def screenshot(self, path: Path) -> Path:
        shot = await self.call("Page.captureScreenshot", format="png",
                               captureBeyondViewport=True)
        await asyncio.to_thread(path.write_bytes, base64.b64decode(shot["data"]))
        print(f"screenshot: {path}")
        return path


@pytest.fixture(scope="module")
def chromium_bin() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (scripts/setup installs it)")
    return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def service(llama_server: Any) -> AsyncIterator[str]:
    """The real app (real models) on a free port; yields its URL."""
    from aiohttp import web

    from services.assistant import load_assistant

    assistant = await load_assistant(llama_server.url)
    runner = web.AppRunner(create_app(assistant))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()
        await assistant.close()


@pytest.fixture(scope="module")
def chromium(chromium_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Headless Chromium whose microphone speaks VOICE_WAV once; yields the DevTools port."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    port = free_port()
    log = (profile / "chromium.log").open("w")
    proc = subprocess.Popen(
        [chromium_bin, "--headless=new", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-quic", "--no-first-run", f"--user-data-dir={profile}",
         # several tabs talk at once (tests/test_web_three.py): none may be throttled
         "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
         "--disable-backgrounding-occluded-windows",
         "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
         f"--use-file-for-fake-audio-capture={VOICE_WAV}%noloop",
         "--window-size=1000,1400", f"--remote-debugging-port={port}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=log)
    try:
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def page(chromium: int, service: str) -> AsyncIterator[Cdp]:
    async with aiohttp.ClientSession() as http:
        targets: list[dict[str, Any]] = []
        for _ in range(100):  # Chromium takes a moment to open its DevTools port
            try:
                async with http.get(f"http://127.0.0.1:{chromium}/json/list") as resp:
                    targets = await resp.json()
                if any(t["type"] == "page" for t in targets):
                    break
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
        target = next(t for t in targets if t["type"] == "page")
        async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            cdp = Cdp(ws)
            await cdp.call("Runtime.enable")
            await cdp.call("Page.enable")
            await cdp.call("Page.navigate", url=service)
            await cdp.wait_for("window.voiceLlm && voiceLlm.connected", 20, "the WebSocket")
            try:
                yield cdp
            finally:
                cdp.reader.cancel()


RESULTS = "voiceLlm.log.filter(m => m.type === 'turn.result')"


async def test_a_spoken_question_gets_a_spoken_answer_and_a_timeline(
        page: Cdp, tmp_path: Path) -> None:
    assert await page.js("voiceLlm.state") == "ready"
    await page.click("#start")  # hands-free mode: the fake microphone starts speaking
    await page.wait_for("voiceLlm.micOn", 10, "the microphone")
    await page.wait_for("voiceLlm.stats.utterancesSent === 1", 30,
                        "the end of the utterance (energy VAD)")
    result = await page.wait_for(f"{RESULTS}[0]", 120, "the turn result")
    assert result["error"] is None, result["error"]
    assert "sleep" in result["transcript"].lower()
    assert result["reply"].strip() and not result["interrupted"]
    stats = await page.js("voiceLlm.stats")
    assert stats["samplesReceived"] > 0
    assert stats["samplesScheduled"] == stats["samplesReceived"]  # every frame was played
    await page.wait_for("voiceLlm.state === 'listening'", 10, "listening again")

    dom = await page.js("""(() => {
        const turn = document.querySelector('.turn[data-turn="1"]');
        return {you: turn.querySelector('.you .text').textContent,
                bot: turn.querySelector('.bot .text').textContent,
                rows: [...turn.querySelectorAll('.tl-row')].map(r => r.dataset.stage),
                bars: [...turn.querySelectorAll('.tl-bar')].map(b => b.className),
                chips: turn.querySelector('.chips').textContent,
                status: document.querySelector('#status-text').textContent};
    })()""")
    assert dom["you"] == result["transcript"]
    assert dom["bot"].strip()
    # hands-free: the endpoint wait is its own span before t = 0
    assert dom["rows"] == ["endpoint", "asr", "llm", "tts", "playback"]
    (wait_start, wait_end), = result["timeline"]["spans"]["endpoint"]
    assert wait_start == result["timeline"]["start"] < 0 == wait_end
    assert result["metrics"]["first_audio_from_speech_end_ms"] > \
        result["metrics"]["first_audio_ms"]
    assert {"tl-bar asr", "tl-bar llm", "tl-bar tts", "tl-bar playback"} <= set(dom["bars"])
    assert "first audio" in dom["chips"] and "end-of-speech wait" in dom["chips"]
    assert dom["status"] == "listening"
    names = await page.js("voiceLlm.log.filter(m => m.type === 'event')"
                          ".map(m => m.event.stage + '.' + m.event.event)")
    for a, b in [("asr.end", "llm.first_token"), ("tts.end", "playback.start"),
                 ("playback.start", "playback.end")]:
        assert names.index(a) < names.index(b)
    await page.screenshot(tmp_path / "voice-turn.png")


async def test_push_to_talk_sends_what_was_said_while_the_button_was_held(
        page: Cdp, tmp_path: Path) -> None:
    await page.click("#start")  # mute: the fake device closes...
    await page.wait_for("!voiceLlm.micOn", 5, "the microphone to stop")
    await page.click("input[value=ptt]")
    await page.click("#start")  # ...and reopening it plays the WAV from the start again
    await page.wait_for("voiceLlm.micOn && !document.querySelector('#talk').disabled", 10,
                        "the talk button")
    box = await page.js("(() => { const r = document.querySelector('#talk')"
                        ".getBoundingClientRect(); return [r.x + 20, r.y + 10]; })()")
    await page.call("Input.dispatchMouseEvent", type="mousePressed", x=box[0], y=box[1],
                    button="left", clickCount=1)
    await page.wait_for("voiceLlm.state === 'hearing'", 5, "recording while held")
    await asyncio.sleep(3.0)  # the WAV is 2.5 s
    await page.call("Input.dispatchMouseEvent", type="mouseReleased", x=box[0], y=box[1],
                    button="left", clickCount=1)
    result = await page.wait_for(f"{RESULTS}[1]", 120, "the push-to-talk turn")
    assert result["error"] is None, result["error"]
    assert "sleep" in result["transcript"].lower()
    await page.wait_for(f"{RESULTS}.length === 2 && voiceLlm.state === 'listening'", 10,
                        "listening again")


async def test_the_interrupt_button_silences_the_page_at_once(
        page: Cdp, tmp_path: Path) -> None:
    await page.click("#typed-text")
    await page.call("Input.insertText",
                    text="Tell me a long story about a lighthouse keeper and the sea.")
    for kind in ("keyDown", "keyUp"):
        await page.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                        windowsVirtualKeyCode=13, text="\r" if kind == "keyDown" else "")
    await page.wait_for("voiceLlm.state === 'speaking'", 60, "the assistant to speak")
    await asyncio.sleep(0.5)
    await page.click("#interrupt")
    after = await page.js("({state: voiceLlm.state, sources: voiceLlm.stats.samplesScheduled})")
    assert after["state"] == "interrupted"  # the page went silent before the server answered
    result = await page.wait_for(f"{RESULTS}[2]", 30, "the interrupted turn's result")
    assert result["interrupted"]
    events = await page.js("voiceLlm.log.filter(m => m.type === 'event' && m.event.turn === 3)"
                           ".map(m => m.event)")
    detected = next(e for e in events if e["stage"] == "bargein")
    assert detected["source"] == "browser"
    assert any(e["stage"] == "llm" and e["event"] == "closed" for e in events)
    assert await page.js("document.querySelector('.turn[data-turn=\"3\"] .tag')"
                         ".textContent") == "interrupted"
    await page.screenshot(tmp_path / "interrupted.png")


async def test_speaking_over_the_assistant_barges_in_hands_free(
        page: Cdp, tmp_path: Path) -> None:
    await page.click("input[value=auto]")
    await page.click("#start")  # mute while the question is typed
    await page.wait_for("!voiceLlm.micOn", 5, "the microphone to stop")
    interrupts = await page.js("voiceLlm.stats.interruptsSent")
    await page.click("#typed-text")
    await page.call("Input.insertText", text="Describe the ocean in many long sentences.")
    for kind in ("keyDown", "keyUp"):
        await page.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter",
                        windowsVirtualKeyCode=13, text="\r" if kind == "keyDown" else "")
    await page.wait_for("voiceLlm.state === 'speaking'", 60, "the assistant to speak")
    await page.click("#start")  # the fake microphone speaks the question over the reply
    await page.wait_for(f"voiceLlm.stats.interruptsSent > {interrupts}", 15,
                        "the voice onset to interrupt")
    spoken_over = await page.wait_for(f"{RESULTS}[3]", 30, "the interrupted turn")
    assert spoken_over["interrupted"]
    answer = await page.wait_for(f"{RESULTS}[4]", 120, "the spoken question's turn")
    assert "sleep" in answer["transcript"].lower() and answer["error"] is None
    await page.screenshot(tmp_path / "voice-barge-in.png")

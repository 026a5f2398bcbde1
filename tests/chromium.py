"""Headless Chromium driven over the DevTools protocol with aiohttp's WebSocket client (no
Playwright), for the browser tests and scripts/bench_page*.py: launch it with a WAV as its
fake microphone (or PulseAudio's), connect to its page, evaluate, click, screenshot."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from services.server_check import free_port  # scripts/bench_page.py takes it from here


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


def find_chromium() -> str | None:
    """The Chromium binary on PATH (Debian names it chromium), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@contextlib.contextmanager
def launch_chromium(binary: str, profile: Path, wav: Path | None,
                    env: dict[str, str] | None = None) -> Iterator[int]:
    """Headless Chromium whose microphone speaks ``wav`` once; yields the DevTools port.
    With ``wav`` None, the real audio devices: PulseAudio's default source and sink, in
    ``env`` (scripts/bench_page_audio.py's private daemon)."""
    port = free_port()
    log = (profile / "chromium.log").open("w")
    microphone = ["--use-fake-device-for-media-stream",
                  f"--use-file-for-fake-audio-capture={wav}%noloop"] if wav else []
    proc = subprocess.Popen(
        [binary, "--headless=new", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-quic", "--no-first-run", f"--user-data-dir={profile}",
         # several tabs talk at once (tests/test_web_three.py): none may be throttled
         "--disable-background-timer-throttling", "--disable-renderer-backgrounding",
         "--disable-backgrounding-occluded-windows",
         "--use-fake-ui-for-media-stream", *microphone,
         "--window-size=1000,1400", f"--remote-debugging-port={port}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=log, env=env)
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


@contextlib.asynccontextmanager
async def open_page(chromium: int, url: str | None = None) -> AsyncIterator[Cdp]:
    """The DevTools connection to Chromium's page; with ``url``, the page loaded there and
    its WebSocket connected."""
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
            if url is not None:
                await cdp.call("Page.navigate", url=url)
                await cdp.wait_for("window.voiceLlm && voiceLlm.connected", 20,
                                   "the WebSocket")
            try:
                yield cdp
            finally:
                cdp.reader.cancel()

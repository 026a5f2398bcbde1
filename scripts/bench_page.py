#!/usr/bin/env python3
"""The browser page hands-free, speculation on vs off (``serve`` vs ``serve --no-speculate``).

Headless Chromium's fake microphone speaks each sample question into the real page
(services/static), which cuts the utterance itself (energy VAD, endpointer.js) and talks to
the real service: llama-server, Whisper, Piper. Two apps share one assistant, one with
speculation and one without; every question is asked in both, the order alternating per
question and round, each time in a fresh conversation (a new page load). Replies are capped
at one sentence: only the time to the first audio is compared.

Reported per condition, p50 (p95), on the pipeline's clocks: ``from last sound`` (the
page's last voiced frame to the first reply sample sent to the page:
``first_audio_from_speech_end_ms``), the page's endpoint wait (its silence when it ended
the utterance), t = 0 -> first audio, and what speculation did. The page's own playback
buffer (80 ms lead) and the browser's audio path are the same in both and not included.

    flock /tmp/cpu.lock scripts/bench_page.py [--llm-url URL] [--rounds 2] [--out out/page]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # the DevTools client the browser tests use

from chromium import Cdp, free_port, launch_chromium  # noqa: E402
from chromium import open_page as devtools  # noqa: E402

from pipeline.metrics import pct  # noqa: E402

RESULT = ("voiceLlm.log.filter(m => m.type === 'turn.result' && !(m.speculation && "
          "['cancelled', 'dropped'].includes(m.speculation.state)))[0]")


@contextlib.contextmanager
def chromium(binary: str, wav: Path) -> Iterator[int]:
    """Chromium (tests/chromium.py) in a throwaway profile; yields its DevTools port."""
    profile = Path(tempfile.mkdtemp(prefix="bench-page-"))
    try:
        with launch_chromium(binary, profile, wav) as port:
            yield port
    finally:
        shutil.rmtree(profile, ignore_errors=True)


LOADS = itertools.count(1)


async def one_turn(cdp: Cdp, url: str) -> dict[str, Any]:
    """A fresh page (a new conversation) at ``url``; the microphone speaks the WAV once."""
    load = f"?load={next(LOADS)}"  # tells the new page from the one still showing
    await cdp.call("Page.navigate", url=url + load)
    await cdp.wait_for(f"location.search === {load!r} && window.voiceLlm && "
                       "voiceLlm.connected", 20, "the WebSocket")
    await cdp.click("#start")
    result: dict[str, Any] = await cdp.wait_for(RESULT, 120, "the turn")
    result["last_end"] = await cdp.js("voiceLlm.lastEnd")
    result["endpoint_messages"] = await cdp.js(
        "voiceLlm.log.filter(m => m.type === 'endpoint').length")
    await cdp.click("#start")  # mute: the fake device starts the WAV again when reopened
    return result


def summary(turns: list[dict[str, Any]]) -> dict[str, Any]:
    def stat(key: str) -> dict[str, float | None]:
        values = [float(v) for v in (key_of(t, key) for t in turns) if v is not None]
        return {"p50": round(statistics.median(values)) if values else None,
                "p95": pct(values, 0.95)}

    specs = [t["speculation"] or {} for t in turns]
    return {"turns": len(turns), "errors": sum(1 for t in turns if t["error"]),
            "from_last_sound_ms": stat("first_audio_from_speech_end_ms"),
            "endpoint_wait_ms": stat("trailing"),
            "first_audio_ms": stat("first_audio_ms"), "asr_ms": stat("asr_ms"),
            "confirmed": sum(1 for s in specs if s.get("state") == "confirmed"),
            "started": sum(s.get("started", 0) for s in specs),
            "cancelled": sum(s.get("cancelled", 0) for s in specs),
            "ended_at_server_endpoint": sum(1 for t in turns
                                            if (t["last_end"] or {}).get("endpointMs"))}


def key_of(turn: dict[str, Any], key: str) -> Any:
    if key == "trailing":
        return (turn["last_end"] or {}).get("trailingMs")
    return turn["metrics"].get(key)


async def bench(args: argparse.Namespace, wavs: list[Path]) -> dict[str, Any]:
    from aiohttp import web

    from services.assistant import load_assistant
    from services.web import create_app

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        raise SystemExit("bench_page: chromium is not installed (scripts/setup installs it)")
    assistant = await load_assistant(args.llm_url)
    assistant.config = replace(assistant.config, max_sentences=1)
    urls: dict[str, str] = {}
    runners: list[web.AppRunner] = []
    for name, speculate in (("on", True), ("off", False)):
        runner = web.AppRunner(create_app(assistant, speculate=speculate))
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        urls[name] = f"http://127.0.0.1:{port}/"
        runners.append(runner)
    turns: dict[str, list[dict[str, Any]]] = {"on": [], "off": []}
    try:
        for i, wav in enumerate(wavs):
            with chromium(binary, wav) as port:
                async with devtools(port) as cdp:
                    for r in range(args.rounds):
                        order = ["on", "off"] if (i + r) % 2 == 0 else ["off", "on"]
                        for name in order:
                            turn = await one_turn(cdp, urls[name])
                            turn["file"], turn["round"] = wav.name, r + 1
                            turns[name].append(turn)
                            m = turn["metrics"]
                            print(f"{wav.name} r{r + 1} speculation {name}: from last sound "
                                  f"{m['first_audio_from_speech_end_ms']} ms, endpoint "
                                  f"{(turn['last_end'] or {}).get('trailingMs')} ms, "
                                  f"{turn['speculation']}", file=sys.stderr, flush=True)
    finally:
        for runner in runners:
            await runner.cleanup()
        await assistant.close()
    return {"conditions": {k: summary(v) for k, v in turns.items()}, "turns": turns}


def markdown(report: dict[str, Any]) -> str:
    c = report["conditions"]

    def cell(name: str, key: str) -> str:
        s = c[name][key]
        return f"{s['p50']} ({s['p95']})"

    rows = ["| ms, p50 (p95) | speculation on | speculation off |", "|---|---:|---:|"]
    for label, key in [("from the last sound", "from_last_sound_ms"),
                       ("endpoint wait (page)", "endpoint_wait_ms"),
                       ("t = 0 -> first audio", "first_audio_ms"), ("asr", "asr_ms")]:
        rows.append(f"| {label} | {cell('on', key)} | {cell('off', key)} |")
    on, off = c["on"]["from_last_sound_ms"]["p50"], c["off"]["from_last_sound_ms"]["p50"]
    ratio = f"{on / off:.2f}" if on and off else "n/a"
    return "\n".join(rows) + (
        f"\n\nfrom-last-sound p50 on/off = {ratio}; turns {c['on']['turns']} + "
        f"{c['off']['turns']}, errors {c['on']['errors']} + {c['off']['errors']}; "
        f"speculation: {c['on']['confirmed']} confirmed, {c['on']['started']} started, "
        f"{c['on']['cancelled']} cancelled; the page ended at the server's endpoint "
        f"{c['on']['ended_at_server_endpoint']} of {c['on']['turns']} times (else its "
        "700 ms fallback, the endpoint not there yet)\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("samples", nargs="?", default=str(ROOT / "samples"),
                   help="directory of question WAVs (default samples/)")
    p.add_argument("--llm-url", default=os.environ.get("VOICE_LLM_URL",
                                                       "http://127.0.0.1:8080"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", default="out/page")
    args = p.parse_args()
    report = asyncio.run(bench(args, sorted(Path(args.samples).glob("*.wav"))))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "page.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "page.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

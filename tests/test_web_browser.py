"""The page in real headless Chromium against the real service (llama-server, Whisper, Piper).

Chromium's fake microphone speaks ``samples/01_sleep_tips.wav`` once (``%noloop``); the
page is driven over the DevTools protocol with aiohttp's WebSocket client (no Playwright):
real clicks on the page's buttons, then the page's own state (``window.voiceLlm``) and DOM
are read back. Screenshots land in the test's tmp dir (paths printed with ``-s``).

A second Chromium speaks the same question with a pause inside it ("What are … three tips
for sleeping better?"): hands-free, the page reports the pause, the server speculates on
"What are", abandons that when the voice comes back, speculates again at the end (holding
the page's end until its reply is ready) and the confirmed turn answers
(services/web_live.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import wave
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from chromium import Cdp, find_chromium, free_port, launch_chromium, open_page

from services import web_live
from services.web import create_app

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
VOICE_WAV = SAMPLES / "01_sleep_tips.wav"

pytestmark = [pytest.mark.browser, pytest.mark.integration,
              pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def chromium_bin() -> str:
    found = find_chromium()
    if found is None:
        pytest.skip("chromium is not installed (scripts/setup installs it)")
    return found


@contextlib.asynccontextmanager
async def serving_page(llm_url: str, **app_options: Any) -> AsyncIterator[str]:
    """The real app (real models) on a free port, talking to ``llm_url``; yields its URL."""
    from aiohttp import web

    from services.assistant import load_assistant

    assistant = await load_assistant(llm_url)
    runner = web.AppRunner(create_app(assistant, **app_options))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        await runner.cleanup()
        await assistant.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def service(llama_server: Any) -> AsyncIterator[str]:
    async with serving_page(llama_server.url) as url:
        yield url


@pytest.fixture(scope="module")
def chromium(chromium_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """Headless Chromium whose microphone speaks VOICE_WAV once; yields the DevTools port."""
    with launch_chromium(chromium_bin, tmp_path_factory.mktemp("chromium-profile"),
                         VOICE_WAV) as port:
        yield port


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def page(chromium: int, service: str) -> AsyncIterator[Cdp]:
    async with open_page(chromium, service) as cdp:
        yield cdp


def with_a_pause(wav: Path, out: Path, at_s: float = 0.8, pause_ms: int = 350) -> Path:
    """``wav`` with digital silence inserted at the quietest 20 ms around ``at_s``: a gap
    between two words, so the words stay whole. 350 ms of it (with the gap's own ~40 ms)
    is past the page's 200 ms pause and short of every endpoint the server can give
    (500 ms and up) and of the page's 700 ms fallback: the utterance goes on."""
    with wave.open(str(wav), "rb") as r:
        params, frames = r.getparams(), r.readframes(r.getnframes())
    samples = np.frombuffer(frames, dtype="<i2")
    rate, step = params.framerate, params.framerate // 50
    first = int((at_s - 0.1) * rate) // step
    energy = [float(np.abs(samples[i * step:(i + 1) * step]).mean())
              for i in range(first, first + 10)]
    cut = (first + int(np.argmin(energy))) * step + step // 2
    silence = np.zeros(rate * pause_ms // 1000, dtype="<i2")
    with wave.open(str(out), "wb") as w:
        w.setparams(params)
        w.writeframes(np.concatenate([samples[:cut], silence, samples[cut:]]).tobytes())
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def paused_page(chromium_bin: str, service: str,
                      tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Cdp]:
    """A second Chromium whose microphone asks the question with a pause inside it."""
    profile = tmp_path_factory.mktemp("chromium-paused")
    wav = with_a_pause(VOICE_WAV, profile.parent / "paused_question.wav")
    with launch_chromium(chromium_bin, profile, wav) as port:
        async with open_page(port, service) as cdp:
            yield cdp


# Answered turns: a speculation the user talked on through has a result too (to drop its
# hidden view), but it was never a turn of the conversation.
RESULTS = ("voiceLlm.log.filter(m => m.type === 'turn.result' && !(m.speculation && "
           "['cancelled', 'dropped'].includes(m.speculation.state)))")


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

    # the pause at the end of the question started the turn that answered it
    assert result["speculation"]["state"] == "confirmed"
    dom = await page.js("""(() => {
        const turn = document.querySelector('.turn[data-turn="TURN"]');
        return {you: turn.querySelector('.you .text').textContent,
                bot: turn.querySelector('.bot .text').textContent,
                rows: [...turn.querySelectorAll('.tl-row')].map(r => r.dataset.stage),
                bars: [...turn.querySelectorAll('.tl-bar')].map(b => b.className),
                chips: turn.querySelector('.chips').textContent,
                status: document.querySelector('#status-text').textContent};
    })()""".replace("TURN", str(result["turn"])))
    assert dom["you"] == result["transcript"]
    assert dom["bot"].strip()
    # hands-free: the endpoint wait is its own span from the last voiced sound; t = 0 is
    # the pause the speculation started on, so it runs on to the confirmation
    assert dom["rows"] == ["endpoint", "asr", "llm", "tts", "playback"]
    (wait_start, wait_end), = result["timeline"]["spans"]["endpoint"]
    assert wait_start == result["timeline"]["start"] < 0 < wait_end
    assert result["metrics"]["first_audio_from_speech_end_ms"] > \
        result["metrics"]["first_audio_ms"]
    assert {"tl-bar asr", "tl-bar llm", "tl-bar tts", "tl-bar playback"} <= set(dom["bars"])
    assert "first audio" in dom["chips"] and "end-of-speech wait" in dom["chips"]
    assert "speculative, endpoint" in dom["chips"]
    assert dom["status"] == "listening"
    # The same turn drawn again as if its wait after the finished words were learned from
    # the user's pauses (the server's ``learned``): its chip says where the wait came from.
    drawn = await page.js("""import('/static/timeline.js').then(({renderTimeline}) => {
        const r = RESULT, chip = (learned) => {
            const el = document.createElement('div');
            renderTimeline(el, r.timeline, r.metrics, null, {...r.speculation, learned,
                                                             wait_ms: 850, reason: 'question'});
            return [...el.querySelectorAll('.chip')].map(c => c.textContent)
                .find(t => t.startsWith('speculative, endpoint'));
        };
        return [chip(false), chip(true)];
    })""".replace("RESULT", json.dumps(result)))
    assert drawn == ["speculative, endpoint 850 ms (question)",
                     "speculative, endpoint 850 ms (question, from your pauses)"]
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
    await asyncio.sleep(3.0)  # the WAV is 2.5 s (push-to-talk reports no pauses)
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
    events = await page.js("voiceLlm.log.filter(m => m.type === 'event' && m.event.turn === "
                           f"{result['turn']}).map(m => m.event)")
    detected = next(e for e in events if e["stage"] == "bargein")
    assert detected["source"] == "browser"
    assert any(e["stage"] == "llm" and e["event"] == "closed" for e in events)
    assert await page.js(f"document.querySelector('.turn[data-turn=\"{result['turn']}\"] .tag')"
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


async def test_a_pause_inside_the_question_is_speculated_on_dropped_and_the_end_answers(
        paused_page: Cdp, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The gap's transcription on every host: on a slow one (Whisper over 400 ms) the server
    # would skip it (the rule is tested in test_web.py; docs/live.md says why).
    monkeypatch.setattr(web_live, "GAP_ASR_MAX_MS", float("inf"))
    page = paused_page
    assert await page.js("voiceLlm.speculate") is True  # hello: the server speculates
    await page.click("#start")  # hands-free: "What are … three tips for sleeping better?"
    await page.wait_for("voiceLlm.micOn", 10, "the microphone")
    result = await page.wait_for(f"{RESULTS}[0]", 120, "the answer")
    assert result["error"] is None, result["error"]
    assert "sleep" in result["transcript"].lower() and result["reply"].strip()
    # The pause inside started a speculation, the voice coming back dropped it, the pause
    # at the end started the one that answered; one utterance, one answer.
    spec = result["speculation"]
    assert spec["state"] == "confirmed"
    assert spec["pauses"] >= 2 and spec["started"] >= 2 and spec["cancelled"] >= 1
    # The answering speculation (at the last pause) held the page's end until its first
    # sentence was synthesized.
    held = await page.js("voiceLlm.log.filter(m => ['hold', 'ready'].includes(m.type) && "
                         f"m.pause === {spec['pauses']}).map(m => [m.type, m.reason ?? null])")
    assert held == [["hold", None], ["ready", "audio"]]
    stats = await page.js("voiceLlm.stats")
    assert stats["utterancesSent"] == 1 and stats["pausesSent"] == spec["pauses"]
    # Each pause came after a gap, where Whisper started on the words so far.
    assert stats["gapsSent"] == spec["gaps"] >= spec["pauses"]
    assert spec["early_asr_used"] >= 1
    assert stats["speculationsConfirmed"] == 1
    assert stats["samplesScheduled"] == stats["samplesReceived"] > 0  # it was played
    # An abandoned speculation that ran played nothing and is not on the page.
    dropped = await page.js("voiceLlm.log.filter(m => m.type === 'turn.result' && "
                            "m.speculation && m.speculation.state === 'cancelled')")
    assert len(dropped) <= spec["cancelled"]
    assert all(m["abandoned"] and m["metrics"]["first_audio_ms"] is None for m in dropped)
    names = await page.js("voiceLlm.log.filter(m => m.type === 'event' && m.event.turn === "
                          f"{result['turn']}).map(m => m.event.stage + '.' + m.event.event)")
    assert names.index("speculation.start") < names.index("speculation.confirmed") \
        < names.index("playback.start")
    # The answering speculation took the transcript Whisper started at the gap before its
    # pause (nothing voiced in between) instead of running Whisper there; unless that gap
    # started none because the first gap's was still running (one at a time: a host where
    # Whisper takes longer than the voice between the two pauses).
    asr_start = await page.js("voiceLlm.log.find(m => m.type === 'event' && m.event.turn === "
                              f"{result['turn']} && m.event.stage === 'asr').event")
    assert asr_start["event"] == "start"
    if "early_ms" in asr_start:
        assert asr_start["early_ms"] > 0
    else:
        assert spec["early_asr_started"] < spec["gaps"], spec
    # The page ended the utterance at the server's endpoint when it came in time, else at
    # its 700 ms fallback; either way only after the voice had stopped for good.
    end = await page.js("voiceLlm.lastEnd")
    assert end["pauses"] == spec["pauses"]
    if end["endpointMs"] is not None:
        assert end["endpointMs"] == spec["wait_ms"] and end["trailingMs"] >= end["endpointMs"]
    else:
        assert end["trailingMs"] >= 700
    assert spec["endpoint_ms"] == end["trailingMs"]
    await page.wait_for("voiceLlm.state === 'listening'", 10, "listening again")
    dom = await page.js("""(() => ({
        turns: [...document.querySelectorAll('.turn')].map(t => t.dataset.turn),
        hidden: document.querySelectorAll('.turn[hidden], .turn[data-speculative]').length,
        chips: document.querySelector('.turn .chips').textContent}))()""")
    assert dom["turns"] == [str(result["turn"])] and dom["hidden"] == 0
    assert "speculative, endpoint" in dom["chips"] and "speculations dropped" in dom["chips"]
    await page.screenshot(tmp_path / "speculated-turn.png")

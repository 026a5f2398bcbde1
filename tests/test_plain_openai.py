"""scripts/plain_openai.py (llama-server with its extras hidden) in front of the REAL
llama-server: turns, a WAV replay and a barge-in complete, and what such a server cannot
tell (prefill, cache, the slot going idle) is reported as not knowable; against
llama-server directly every capability is there. docs/llm-servers.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.audio_out import RealtimeNullSink
from pipeline.conversation import Conversation
from pipeline.llm_caps import NOT_REPORTED, NOT_VERIFIABLE
from pipeline.llm_client import ChatOptions, LlmClient
from pipeline.turn import TurnConfig, TurnRunner
from services.server_check import free_port

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "plain_openai.py"
SAMPLES = ROOT / "samples"
MESSAGES = [{"role": "user", "content": "Say hello."}]


def test_help_says_what_it_is() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    assert "--upstream" in proc.stdout and "extras hidden" in proc.stdout


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


@pytest.fixture(scope="module")
def plain(llama_server) -> Iterator[str]:  # type: ignore[no-untyped-def]
    """The proxy as a process (the real script), in front of the real llama-server."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--upstream", llama_server.url,
                             "--port", str(port)], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while _status(url + "/v1/models") != 200:
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "plain_openai.py did not come up"
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def piper():  # type: ignore[no-untyped-def]
    from models_fixture import piper_voice

    from pipeline.tts import PiperTts

    onnx, cfg = piper_voice()
    tts = PiperTts(onnx, cfg)
    tts.load()
    return tts


async def caps_after_one_reply(url: str) -> dict[str, object]:
    async with LlmClient(url) as client:
        async with client.stream_chat(MESSAGES, ChatOptions(
                max_tokens=8, include_usage=True, extra={"timings_per_token": True})) as s:
            async for _ in s:
                pass
        assert s.finished is not None and client.caps is not None
        return client.caps.to_dict()


@pytest.mark.integration
async def test_capabilities_direct_and_through_the_proxy(llama_server, plain) -> None:
    direct = await caps_after_one_reply(llama_server.url)
    assert direct["server"] == "llama-server"
    assert all(direct[k] is True for k in ("health", "props", "slots", "timings", "usage"))
    assert direct["unknowable"] == [] and direct["n_ctx"]
    hidden = await caps_after_one_reply(plain)
    assert hidden["server"] == "openai-compatible" and hidden["usage"] is True
    assert not any(hidden[k] for k in ("health", "props", "slots", "timings"))
    assert hidden["models"] == direct["models"]  # the same engine behind it
    assert {"prefill_ms", "cache_n", "bargein_to_slot_idle_ms"} <= set(hidden["unknowable"])
    for path in ("/slots", "/props", "/health"):
        assert _status(plain + path) == 404


@pytest.mark.integration
async def test_text_turns_through_the_proxy(plain, piper) -> None:
    sink = RealtimeNullSink()
    await sink.open(piper.sample_rate)
    async with LlmClient(plain) as client:
        # Short replies read to their end: a complete stream is what shows that the
        # server sends no timings (a cut one could still have had them on its last chunk).
        runner = TurnRunner(None, client, piper, sink, Conversation(),
                            TurnConfig(max_sentences=None, max_tokens=16))
        results = [await runner.run(text=q) for q in ("Why is the sky blue?",
                                                      "And why is the sunset red?")]
    for r in results:
        assert r.error is None, r.error
        assert r.reply.strip() and r.metrics.first_audio_ms is not None
        m = r.metrics
        assert m.prefill_ms is None and m.cache_n is None and m.prompt_n is None
        assert {"prefill_ms", "cache_n", "prompt_n"} <= set(m.not_reported)
        assert m.completion_tokens is not None and m.completion_tokens <= 16  # usage
        caps = next(e.data for e in r.events if e.name == "llm.capabilities")
        assert caps["server"] == "openai-compatible" and caps["timings"] is False
    assert len(runner.conversation.history) == 4


@pytest.mark.integration
def test_replay_and_barge_in_through_the_proxy(llama_server, plain, tmp_path: Path) -> None:
    out, events = tmp_path / "replay.json", tmp_path / "events.jsonl"
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli", "replay", str(SAMPLES / "02_bicycle_history.wav"),
         "--interrupt-at", "0.5", "--interrupt-wav", str(SAMPLES / "03_sky_blue.wav"),
         "--llm-url", plain, "--json", str(out), "--events", str(events)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert record["llm_capabilities"]["server"] == "openai-compatible"
    interrupted, after = record["turns"]
    assert interrupted["interrupted"] is True and interrupted["error"] is None
    assert interrupted["bargein_to_silence_ms"] is not None  # ours: still measured
    assert interrupted["bargein_to_slot_idle_ms"] is None  # the server's: not knowable
    assert "sky" in after["transcript"].lower() and after["error"] is None
    for turn in record["turns"]:
        assert turn["prefill_ms"] is None and turn["cache_n"] is None  # never a made-up 0
    # /slots is known missing from the start; missing timings once a reply completed (a
    # reply cut by the barge-in could still have carried them on its last chunk).
    assert "bargein_to_slot_idle_ms" in interrupted["not_reported"]
    assert {"prefill_ms", "cache_n"} <= set(after["not_reported"])
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    idle = [e for e in lines if e["event"] == "slot_idle"]
    assert idle and idle[0]["confirmed"] is False and idle[0]["verifiable"] is False
    assert f"prefill n/a ({NOT_REPORTED})" in proc.stdout
    assert f"barge-in: {NOT_VERIFIABLE}" in proc.stdout

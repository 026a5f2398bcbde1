"""Faults the pipeline must survive (issue 12): what is saved when the process dies or is
stopped, TTS failures, a dying llama-server, context overflow. scripts/faults runs these
and prints the fault table; the real parts are used wherever they can produce the fault."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.events import Event, EventName
from services.turn_options import EventWriter, write_json_atomic

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def test_events_are_on_disk_one_line_per_event_before_close(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writer = EventWriter(path)
    writer(Event(1, 0.0, EventName.TURN_START, {"mode": "streamed"}))
    writer(Event(1, 0.1, EventName.ASR_START, {"audio_s": 1.0}))
    # Not closed: a kill -9 now would find both lines complete.
    lines = path.read_text().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["start", "start"]
    writer.close()
    writer.close()  # idempotent


def test_json_is_replaced_atomically(tmp_path: Path) -> None:
    path = tmp_path / "out" / "r.json"
    write_json_atomic(path, {"turns": [1]})
    write_json_atomic(path, {"turns": [1, 2]})
    assert json.loads(path.read_text()) == {"turns": [1, 2]}
    assert [p.name for p in path.parent.iterdir()] == ["r.json"]  # no temp file left


def _replay(*args: str, tmp_path: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    return subprocess.Popen([sys.executable, "-m", "services.cli", "replay", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _wait_for_event(path: Path, event: str, timeout: float = 120.0) -> list[dict[str, object]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            evs = [json.loads(line) for line in path.read_text().splitlines() if line]
            if any(f"{e['stage']}.{e['event']}" == event for e in evs):
                return evs
        time.sleep(0.05)
    raise AssertionError(f"no {event} in {path} within {timeout} s")


@pytest.mark.integration
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_replay_stopped_by_a_signal_closes_the_turn_and_saves(
        llama_server, tmp_path: Path, sig: signal.Signals, code: int) -> None:
    events, out = tmp_path / "events.jsonl", tmp_path / "replay.json"
    proc = _replay(str(SAMPLES / "01_sleep_tips.wav"), str(SAMPLES / "02_bicycle_history.wav"),
                   str(SAMPLES / "03_sky_blue.wav"), "--llm-url", llama_server.url,
                   "--max-sentences", "0", "--max-tokens", "200", "--events", str(events),
                   "--json", str(out), tmp_path=tmp_path)
    try:
        # Turn 1 is finished and saved; kill during turn 2's playback.
        _wait_for_event(events, "turn.end")
        assert json.loads(out.read_text())["turns"][0]["error"] is None
        evs = _wait_for_event(events, "playback.start")
        while not [e for e in evs if e["turn"] == 2 and e["event"] == "start"
                   and e["stage"] == "playback"]:
            evs = _wait_for_event(events, "playback.start")
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, stderr
    assert "Traceback" not in stderr
    line = [x for x in stderr.splitlines() if "stopped by" in x]
    assert len(line) == 1 and sig.name in line[0] and str(events) in line[0]
    evs = [json.loads(x) for x in events.read_text().splitlines()]
    turn2 = [f"{e['stage']}.{e['event']}" for e in evs if e["turn"] == 2]
    assert "bargein.detected" in turn2 and turn2[-1] == "turn.end"
    idle = [e for e in evs if e["turn"] == 2 and e["event"] == "slot_idle"]
    assert idle and idle[0]["confirmed"] is True
    assert not any(e["turn"] == 3 for e in evs)  # stopped: no further turn
    data = json.loads(out.read_text())
    assert len(data["turns"]) == 2 and data["turns"][1]["interrupted"] is True
    assert data["history"]["history"][-1]["content"].endswith("…")

"""`voice-llm replay` and `voice-llm compare`: report building (unit) and the real commands
end to end (real server, Whisper, Piper), including a broken WAV among good ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from services.compare import build_report, collect_wavs, markdown, representative
from services.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def turn(mode: str, file: str, run: int, first_audio: float, cache: int = 90,
         prompt: int = 10) -> dict[str, object]:
    return {"mode": mode, "file": file, "run": run, "first_audio_ms": first_audio,
            "cache_n": cache, "prompt_n": prompt, "transcript": "q", "reply": "a.",
            "error": None}


def test_collect_wavs_expands_folders_and_rejects_missing(tmp_path: Path) -> None:
    assert collect_wavs([str(SAMPLES)])[0].name == "01_sleep_tips.wav"
    with pytest.raises(UserError, match="no such file"):
        collect_wavs([str(tmp_path / "nope.wav")])
    with pytest.raises(UserError, match="no .wav files"):
        collect_wavs([str(tmp_path)])


def test_report_ratio_cache_reuse_and_markdown() -> None:
    turns = [turn("serial", "a.wav", 1, 3000, cache=0, prompt=50),
             turn("serial", "b.wav", 1, 3400),
             turn("streamed", "a.wav", 1, 1000, cache=0, prompt=50),
             turn("streamed", "b.wav", 1, 1200)]
    report = build_report(turns)
    s = report["summary"]
    assert s["first_audio_ratio"] == round(1100 / 3200, 3)
    assert s["cache_reuse_turn2plus"] == 0.9  # first turns excluded: 90 / (90 + 10)
    assert s["serial"]["first_audio_ms"]["p50"] == 3200
    assert representative(turns, "streamed")["file"] in ("a.wav", "b.wav")
    md = markdown(report)
    assert "| first_audio_ms |" in md and "waterfall.png" in md


def test_failed_turns_do_not_count_in_the_summary() -> None:
    bad = {**turn("streamed", "c.wav", 1, 1.0), "error": "boom", "first_audio_ms": None}
    report = build_report([turn("serial", "a.wav", 1, 3000), turn("streamed", "a.wav", 1, 900),
                           bad])
    assert report["summary"]["streamed"]["first_audio_ms"]["n"] == 1


def voice_llm(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "services.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.integration
def test_replay_survives_a_broken_wav_and_keeps_the_conversation(
        llama_server, tmp_path: Path) -> None:
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"RIFF\x10\x00\x00\x00WAVEfmt ")  # truncated header
    out, events = tmp_path / "replay.json", tmp_path / "events.jsonl"
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    proc = voice_llm("replay", str(SAMPLES / "03_sky_blue.wav"), str(broken),
                     str(SAMPLES / "01_sleep_tips.wav"), "--llm-url", llama_server.url,
                     "--max-sentences", "1", "--json", str(out), "--events", str(events),
                     "--out-wav", str(tmp_path / "reply.wav"), env=env)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "broken.wav" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr
    data = json.loads(out.read_text())
    assert [t["error"] for t in data["turns"]] == [None, None]
    assert len(data["history"]["history"]) == 4
    assert data["turns"][1]["cache_n"] > 0
    names = [json.loads(line)["event"] for line in events.read_text().splitlines()]
    assert names.count("start") >= 2 and "first_token" in names
    assert (tmp_path / "reply.wav").stat().st_size > 44
    assert "first audio" in proc.stdout


@pytest.mark.integration
def test_compare_writes_the_report(llama_server, tmp_path: Path) -> None:
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    out = tmp_path / "cmp"
    proc = voice_llm("compare", str(SAMPLES / "03_sky_blue.wav"), "--runs", "1",
                     "--max-sentences", "2", "--llm-url", llama_server.url, "--out", str(out),
                     env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "compare.json").read_text())
    assert {t["mode"] for t in report["turns"]} == {"serial", "streamed"}
    for t in report["turns"]:
        assert {"file", "run", "transcript", "reply", "heard", "first_audio_ms",
                "overhead_ms"} <= set(t)
    assert report["summary"]["first_audio_ratio"] is not None
    assert (out / "waterfall.png").stat().st_size > 1000
    assert "ratio" in proc.stdout


def test_interrupt_wav_needs_a_time(tmp_path: Path) -> None:
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    proc = voice_llm("replay", str(SAMPLES / "03_sky_blue.wav"), "--interrupt-wav",
                     str(SAMPLES / "01_sleep_tips.wav"), "--llm-url", "http://127.0.0.1:9",
                     env=env)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "--interrupt-at" in proc.stderr


@pytest.mark.integration
def test_replay_interrupt_wav_becomes_the_next_turn(llama_server, tmp_path: Path) -> None:
    out = tmp_path / "replay.json"
    env = {**os.environ, "VOICE_LLM_STATE": str(tmp_path / "state")}
    proc = voice_llm("replay", str(SAMPLES / "02_bicycle_history.wav"), "--interrupt-at", "0.5",
                     "--interrupt-wav", str(SAMPLES / "03_sky_blue.wav"), "--llm-url",
                     llama_server.url, "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    first, second = json.loads(out.read_text())["turns"]
    assert first["interrupted"] is True and first["bargein_to_silence_ms"] is not None
    assert "sky" in second["transcript"].lower() and second["interrupted"] is False
    # 0.5 s of the reply is a word or two: too little to keep (pipeline/heard.py)
    assert "this turn is not kept: fewer than 4 words" in proc.stdout

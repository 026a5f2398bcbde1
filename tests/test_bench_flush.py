"""scripts/bench_flush.py's reading of the recording (the bench itself needs PulseAudio)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
from script_module import load_script

bench = load_script("bench_flush")
RATE = 22050


def write_tones(path: Path, spans_ms: list[tuple[int, int]], total_ms: int) -> None:
    x = np.zeros(RATE * total_ms // 1000, dtype=np.int16)
    t = np.arange(x.size) / RATE
    tone = (16000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16)
    for start, end in spans_ms:
        x[RATE * start // 1000:RATE * end // 1000] = tone[RATE * start // 1000:RATE * end // 1000]
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(x.tobytes())


def test_the_tones_are_found_where_they_are_on_the_recording(tmp_path: Path) -> None:
    wav = tmp_path / "rec.wav"
    write_tones(wav, [(100, 400), (800, 1100), (1500, 2000)], 2500)
    runs = bench.loud_runs(wav)
    assert len(runs) == 3
    want = [(100, 400), (800, 1100), (1500, 2000)]
    for (start, end), (want_start, want_end) in zip(runs, want, strict=True):
        assert abs(start - want_start) <= 1 and abs(end - want_end) <= 1  # one ~1 ms frame


def test_tail_and_next_latency_are_against_the_cut_tones_own_latency() -> None:
    # Player calls at 10.0 (reference), 10.7 (cut tone), stop at 11.0, next at 11.5; the
    # reference reached the recording at 500 ms. The cut tone came 60 ms later than the
    # reference's latency, kept playing 40 ms past its stop + latency, and the next tone
    # came 1000 ms later than the cut tone's latency.
    at = {"reference": 10.0, "cut": 10.7, "stop": 11.0, "next": 11.5}
    runs = [(500, 800), (1260, 1600), (3060, 3560)]
    got = bench.on_the_recording(at, runs)
    assert abs(got["cut_tail_ms"] - 40) < 1e-6
    assert abs(got["next_latency_ms"] - 1000) < 1e-6
    assert "error" in bench.on_the_recording(at, runs[:2])


def test_the_table_gives_each_condition_its_span() -> None:
    rows = [{"recorder": "10", "flush": "on", "cut_tail_ms": -50.2, "next_latency_ms": 4.0,
             "longest_gap_ms": 20.0, "open_gap_ms": 1201.4, "flushes_after": True},
            {"recorder": "10", "flush": "on", "cut_tail_ms": -47.9, "next_latency_ms": 6.4,
             "longest_gap_ms": 21.0, "open_gap_ms": 1253.0, "flushes_after": True},
            {"recorder": "none", "flush": "on", "longest_gap_ms": 1919.0,
             "flushes_after": False}]
    lines = bench.table(rows).splitlines()
    assert lines[2] == "| 10 | on | 2 | -50 to -48 | 4 to 6 | 20 to 21 | 1201 to 1253 | True |"
    assert lines[3] == "| none | on | 1 | - | - | 1919 | - | False |"

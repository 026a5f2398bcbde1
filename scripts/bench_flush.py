#!/usr/bin/env python3
"""What the output flush after a barge-in buys and costs, on the audio.

After a barge-in ``SoundDeviceSink.stop()`` drops what the device has queued (PortAudio
abort, then restart) so the reply goes quiet at once. This bench plays, through a real
PulseAudio null sink (the daemon of the ``talk`` tests, ``tests/pulse.py``), a reference
tone, then a tone cut 0.3 or 0.6 s in, then the next tone 0.3 or 0.8 s after the cut, with
the flush on and off (``SoundDeviceSink.flushes``) in the same run, and reads from the
speaker's recorded monitor:

* ``cut_tail_ms``: when the cut tone ends, after the stop call plus the cut tone's own
  onset latency (how much of the queue was still heard);
* ``next_latency_ms``: the next tone's onset latency minus the cut tone's (what the
  restart costs the reply after a barge-in);
* ``longest_gap_ms``: the longest time the device went without a callback after the stop;
* ``open_gap_ms``: the same while the stream started (before the reference tone).

Recorders: the monitor recorded at 10 ms latency, at 2000 ms, or not at all (``none``:
callback gaps only, nothing on the audio). A null sink nothing holds at a low latency
stalls ~1.9 s after a flush (docs/talk.md, "Barge-in"). Each trial runs in its own daemon
and its own process. Run alone (two cores): ``flock /tmp/cpu.lock`` in front.

Usage: scripts/bench_flush.py [--reps 3] [--recorders 10 none 2000] [--out out/flush]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the PulseAudio helpers the tests use

from pulse import MISSING_REASON, frame_rms, private_pulse, pulse_missing  # noqa: E402

RATE = 22050
FRAME_S = 0.001
LOUD = 0.05  # RMS: a tone at half scale is ~0.35; the null sink's silence is 0
CASES = ((0.3, 0.3), (0.6, 0.8))  # (cut after s, next tone after the cut s)

CHILD = r"""
import asyncio, json, sys, time
import numpy as np
from pipeline.speaker import SoundDeviceSink
RATE = 22050
flush, cut_after, gap = sys.argv[1] == "on", float(sys.argv[2]), float(sys.argv[3])

def tone(seconds, hz):
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.5 * 32767 * np.sin(2 * np.pi * hz * t)).astype(np.int16)

async def main():
    sink = SoundDeviceSink()
    sink.flushes = flush
    callbacks = []
    pull = sink._callback
    def counted(*args):
        callbacks.append(time.monotonic())
        pull(*args)
    sink._callback = counted  # before open(): the stream takes this one
    await sink.open(RATE)
    await asyncio.sleep(0.5)
    at = {"reference": time.monotonic()}
    await sink.play(tone(0.3, 660))
    await asyncio.sleep(0.4)
    at["cut"] = time.monotonic()
    task = asyncio.create_task(sink.play(tone(3.0, 440)))
    await asyncio.sleep(cut_after)
    at["stop"] = time.monotonic()
    sink.stop()
    await task
    await asyncio.sleep(gap)
    sink.resume()
    at["next"] = time.monotonic()
    await sink.play(tone(0.5, 880))
    before = [c for c in callbacks if c < at["reference"]]
    at["open_gap"] = float(np.diff(before).max()) if len(before) > 1 else None
    after = [c for c in callbacks if c > at["stop"]]
    at["longest_gap"] = float(np.diff(after).max()) if len(after) > 1 else None
    at["flushes_after"] = sink.flushes
    await asyncio.sleep(0.3)
    await sink.close()
    print(json.dumps(at))

asyncio.run(main())
"""


def loud_runs(path: Path) -> list[tuple[float, float]]:
    """(start ms, end ms) of each tone on the recording, to the ~1 ms frame in which its
    RMS crosses ``LOUD``; gaps under 20 ms are bridged."""
    rms, rate = frame_rms(path, FRAME_S)
    hop = int(rate * FRAME_S)  # frame_rms's frames: 22 samples at 22050 Hz, 0.998 ms
    frames: list[tuple[int, int]] = []
    for i in np.flatnonzero(rms > LOUD):
        if frames and (i - frames[-1][1]) * hop <= 0.020 * rate:
            frames[-1] = (frames[-1][0], int(i) + 1)
        else:
            frames.append((int(i), int(i) + 1))
    ms = 1000 * hop / rate
    return [(start * ms, end * ms) for start, end in frames]


def trial(recorder: str, flush: str, cut_after: float, gap: float, wav: Path) -> dict[str, Any]:
    with private_pulse() as env:
        rec = None
        if recorder != "none":
            rec = subprocess.Popen(
                ["parecord", "--device=speaker.monitor", f"--rate={RATE}", "--channels=1",
                 "--format=s16le", f"--latency-msec={recorder}", str(wav)], env=env)
            time.sleep(0.5)
        try:
            child = subprocess.run([sys.executable, "-c", CHILD, flush, str(cut_after), str(gap)],
                                   env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True,
                                   text=True, timeout=60)
        finally:
            if rec is not None:
                time.sleep(0.3)
                rec.terminate()
                rec.wait(10)
    if child.returncode != 0:
        raise SystemExit(f"bench_flush: the player failed:\n{child.stderr[-2000:]}")
    at = json.loads(child.stdout.strip().splitlines()[-1])
    row = {"recorder": recorder, "flush": flush, "cut_after_s": cut_after, "gap_s": gap,
           "longest_gap_ms": None if at["longest_gap"] is None else at["longest_gap"] * 1000,
           "open_gap_ms": None if at["open_gap"] is None else at["open_gap"] * 1000,
           "flushes_after": at["flushes_after"]}
    if rec is not None:
        row.update(on_the_recording(at, loud_runs(wav)))
    return row


def on_the_recording(at: dict[str, Any], runs: list[tuple[float, float]]) -> dict[str, Any]:
    """The cut tone's tail and the next tone's latency, from the three tones' spans on the
    recording (ms) and the player's calls (``at``, monotonic s). The recording's clock is
    tied to the player's by the reference tone, so both figures are against a fresh play's
    latency; the cut tone's own onset latency is taken out of both."""
    if len(runs) < 3:
        return {"error": f"{len(runs)} tones on the recording, 3 expected"}
    (ref, _), (cut_on, cut_end), (next_on, _) = runs[:3]
    offset = ref - at["reference"] * 1000  # recording ms = call ms + offset + latency
    cut_latency = cut_on - (at["cut"] * 1000 + offset)
    return {"cut_tail_ms": cut_end - (at["stop"] * 1000 + offset) - cut_latency,
            "next_latency_ms": next_on - (at["next"] * 1000 + offset) - cut_latency}


def span(values: list[float]) -> str:
    if not values:
        return "-"
    lo, hi = round(min(values)) + 0, round(max(values)) + 0  # + 0: no "-0"
    return f"{lo}" if lo == hi else f"{lo} to {hi}"


def values(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [r[key] for r in rows if r.get(key) is not None]


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| recorder | flush | trials | cut tail ms | next tone latency ms | longest "
             "callback gap ms | longest gap at open ms | still flushing after |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for recorder in dict.fromkeys(r["recorder"] for r in rows):
        for flush in ("on", "off"):
            group = [r for r in rows if r["recorder"] == recorder and r["flush"] == flush]
            if not group:
                continue
            still = (statistics.mode(r["flushes_after"] for r in group) if flush == "on"
                     else "-")
            keys = ("cut_tail_ms", "next_latency_ms", "longest_gap_ms", "open_gap_ms")
            cells = [span(values(group, key)) for key in keys]
            lines.append(f"| {recorder} | {flush} | {len(group)} | {' | '.join(cells)} "
                         f"| {still} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Writes flush.json (every trial) and flush.md.")
    ap.add_argument("--reps", type=int, default=3, help="trials per condition and case")
    ap.add_argument("--recorders", nargs="+", default=["10", "none", "2000"],
                    help="monitor recorder latency in ms, or none (default: 10 none 2000)")
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "flush")
    args = ap.parse_args(argv)
    if pulse_missing():
        print(f"bench_flush: {MISSING_REASON}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    plan = [(rec, flush, cut, gap) for rec in args.recorders for _ in range(args.reps)
            for flush in ("on", "off") for cut, gap in CASES]
    rows = []
    for i, (rec, flush, cut, gap) in enumerate(plan, 1):
        wav = args.out / f"trial{i:02d}.wav"
        rows.append(trial(rec, flush, cut, gap, wav))
        print(f"[{i}/{len(plan)}] {json.dumps(rows[-1])}", flush=True)
    (args.out / "flush.json").write_text(json.dumps(rows, indent=1))
    md = table(rows)
    (args.out / "flush.md").write_text(md + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

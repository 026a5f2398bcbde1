#!/usr/bin/env python3
"""What idling costs each engine, and what keeping it warm gives back, in one run.

A live turn always follows seconds of idling: the user was talking. This times the same
call three ways, alternating per call: right after another one ("back to back"), after
``--idle`` seconds with nothing running ("idle"), and after the same idle time with the
engine's ``keep_warm()`` pass once a second ("idle, kept warm": what ``pipeline/warm.py``
does while the user speaks). Engines: Whisper on the sample questions, Piper on short
first-sentence heads. (llama-server is not here: its time to first token depends on what
its KV cache holds, which "back to back" would change; the pipeline does not warm it.)

    flock /tmp/cpu.lock scripts/bench_idle.py [--idle 6] [--rounds 2] [--out out/idle]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.audio_in import load_wav  # noqa: E402

HEADS = ["The history of bicycles", "Blue appears", "To make a great cup of tea,",
         "One effective way"]
CONDITIONS = ("back to back", "idle", "idle, kept warm")


def wait(idle_s: float, warm: Callable[[], object] | None) -> None:
    end = time.monotonic() + idle_s
    while (left := end - time.monotonic()) > 0:
        time.sleep(min(1.0, left))
        if warm is not None and end - time.monotonic() > 0.2:
            warm()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--idle", type=float, default=6.0, help="seconds idle (default 6)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "out" / "idle")
    args = p.parse_args()

    from pipeline.asr import WhisperAsr
    from pipeline.tts import PiperTts
    from services import models

    asr = WhisperAsr(models.whisper_model_dir())
    asr.load()
    onnx, config = models.piper_voice()
    tts = PiperTts(onnx, config, threads=1)
    tts.load()
    clips = [load_wav(f) for f in sorted((ROOT / "samples").glob("*.wav"))]

    def timed(call: Callable[[], object]) -> float:
        started = time.perf_counter()
        call()
        return (time.perf_counter() - started) * 1000

    engines: dict[str, tuple[list[Callable[[], float]], Callable[[], object]]] = {
        "whisper": ([lambda a=a: timed(lambda: asr.transcribe(a)) for a in clips],
                    asr.keep_warm),
        "piper": ([lambda h=h: timed(lambda: tts.synthesize(h)) for h in HEADS], tts.keep_warm),
    }
    rows: dict[str, dict[str, list[float]]] = {e: {c: [] for c in CONDITIONS} for e in engines}
    total = args.rounds * sum(len(calls) for calls, _ in engines.values()) * len(CONDITIONS)
    done = 0
    for r in range(args.rounds):
        for engine, (calls, warm) in engines.items():
            for i, call in enumerate(calls):
                order = CONDITIONS if (i + r) % 2 == 0 else CONDITIONS[::-1]
                for cond in order:
                    if cond == "back to back":
                        call()  # the call before: this one follows it at once
                    else:
                        wait(args.idle, warm if cond == "idle, kept warm" else None)
                    rows[engine][cond].append(call())
                    done += 1
                    print(f"\r{done}/{total} calls", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    lines = [f"| ms, p50 (min) | {' | '.join(CONDITIONS)} | idle / back to back | "
             "kept warm / back to back |", "|---|" + "---:|" * (len(CONDITIONS) + 2)]
    for engine, by in rows.items():
        p50 = {c: statistics.median(v) for c, v in by.items()}
        cells = " | ".join(f"{p50[c]:.0f} ({min(by[c]):.0f})" for c in CONDITIONS)
        lines.append(f"| {engine} | {cells} | {p50['idle'] / p50['back to back']:.2f} | "
                     f"{p50['idle, kept warm'] / p50['back to back']:.2f} |")
    table = "\n".join(lines)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "idle.json").write_text(json.dumps({"idle_s": args.idle, "calls": rows},
                                                   indent=2) + "\n")
    (args.out / "idle.md").write_text(
        f"# Idle engines (`scripts/bench_idle.py`, {args.idle:.0f} s idle), "
        f"{time.strftime('%Y-%m-%d %H:%M')}\n\n{table}\n")
    print(table)
    print(f"\nreport: {args.out / 'idle.md'} (every call: idle.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

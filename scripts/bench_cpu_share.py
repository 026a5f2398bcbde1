#!/usr/bin/env python3
"""The two cores split between Piper and llama-server: the first chunk while the server decodes.

In a streamed turn Piper synthesizes the reply's first chunk while llama-server decodes the
rest of the reply on the same cores. This times that synthesis in four conditions, one run,
the order rotating per call: Piper on 1 or 2 onnxruntime threads, llama-server at nice 0 or
19 (`voice-llm up --nice`; two managed servers, the same binary and model, each idle unless
asked). Each call streams a real reply (the sample questions, transcribed by Whisper first)
and, at its 8th token, synthesizes a first-sentence head while the stream goes on; then the
same head again with the server idle. It also times Whisper's transcript to the first token,
which the server's niceness must not slow: nothing else runs then.

    flock /tmp/cpu.lock .venv/bin/python scripts/bench_cpu_share.py [--rounds 2] \
        [--out out/cpu_share]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipeline.audio_in import load_wav  # noqa: E402
from pipeline.conversation import DEFAULT_SYSTEM_PROMPT  # noqa: E402
from pipeline.metrics import pct  # noqa: E402

HEADS = ["The history of bicycles", "Blue appears", "To make a great cup of tea,",
         "One effective way", "When planning a weekend hiking trip,", "A good night's sleep"]
AT_TOKEN = 8  # the word cut's first chunk is about this many tokens into the reply
THREADS = (1, 2)
NICES = (0, 19)


def stream_tokens(port: int, question: str) -> Iterator[float]:
    """Yield the arrival time of each streamed token of a real reply to ``question``."""
    body = {"messages": [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
                         {"role": "user", "content": question}],
            "stream": True, "max_tokens": 80, "cache_prompt": True}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        for raw in conn.getresponse():
            line = raw.decode().strip()
            if line.startswith("data: {"):
                yield time.perf_counter()
    finally:
        conn.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=2, help="passes over the samples (default 2)")
    p.add_argument("--out", type=Path, default=ROOT / "out" / "cpu_share")
    args = p.parse_args()

    from pipeline.asr import WhisperAsr
    from pipeline.tts import PiperTts
    from services import models
    from services.llama_server import LlamaServer, ServerOptions
    from services.server_check import free_port

    asr = WhisperAsr(models.whisper_model_dir())
    asr.load()
    onnx, config = models.piper_voice()
    voices = {n: PiperTts(onnx, config, threads=n) for n in THREADS}
    for voice in voices.values():
        voice.load()
    clips = [load_wav(f) for f in sorted((ROOT / "samples").glob("*.wav"))]
    conditions = [(t, n) for n in NICES for t in THREADS]
    rows: dict[str, list[dict[str, Any]]] = {label(t, n): [] for t, n in conditions}
    total = args.rounds * len(clips) * len(conditions)
    with ExitStack() as stack:
        ports: dict[int, int] = {}
        for nice in NICES:
            server = LlamaServer(Path(stack.enter_context(tempfile.TemporaryDirectory())))
            ports[nice] = free_port()
            server.start(ServerOptions(port=ports[nice], nice=nice), quiet=True)
            stack.callback(server.stop)
        done = 0
        for r in range(args.rounds):
            for i, clip in enumerate(clips):
                shift = (i + r) % len(conditions)
                for threads, nice in conditions[shift:] + conditions[:shift]:
                    head = HEADS[(i + r) % len(HEADS)]
                    voice = voices[threads]
                    time.sleep(0.5)
                    heard = time.perf_counter()
                    # A fresh question each call, so no condition reuses another's KV cache.
                    question = f"{asr.transcribe(clip)} ({r}{threads}{nice})"
                    asked = time.perf_counter()
                    first = under_decode = None
                    for n, at in enumerate(stream_tokens(ports[nice], question), 1):
                        first = first or at
                        if n == AT_TOKEN:
                            started = time.perf_counter()
                            voice.synthesize(head)
                            under_decode = (time.perf_counter() - started) * 1000
                    time.sleep(0.3)
                    started = time.perf_counter()
                    voice.synthesize(head)
                    alone = (time.perf_counter() - started) * 1000
                    rows[label(threads, nice)].append({
                        "whisper_ms": (asked - heard) * 1000,
                        "ttft_ms": ((first or asked) - asked) * 1000,
                        "piper_under_decode_ms": under_decode, "piper_alone_ms": alone})
                    done += 1
                    print(f"\r{done}/{total} calls", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    table = report(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cpu_share.json").write_text(json.dumps(rows, indent=2) + "\n")
    (args.out / "cpu_share.md").write_text(
        f"# Piper beside llama-server (`scripts/bench_cpu_share.py`), "
        f"{time.strftime('%Y-%m-%d %H:%M')}\n\n{table}\n")
    print(table)
    print(f"\nreport: {args.out / 'cpu_share.md'} (every call: cpu_share.json)")
    return 0


def label(threads: int, nice: int) -> str:
    return f"Piper {threads} thread{'s' if threads > 1 else ''}, server nice {nice}"


def report(rows: dict[str, list[dict[str, Any]]]) -> str:
    base = label(1, 0)  # the previous defaults

    def p50(cond: str, key: str) -> float:
        return pct([r[key] for r in rows[cond] if r[key] is not None], 0.5) or 0.0

    def p95(cond: str, key: str) -> float:
        return pct([r[key] for r in rows[cond] if r[key] is not None], 0.95) or 0.0

    lines = ["| ms, p50 (p95) | Piper under decode | vs 1 thread, nice 0 | Piper alone | "
             "Whisper | transcript → 1st token | calls |", "|---|" + "---:|" * 6]
    for cond, calls in rows.items():
        ratio = p50(cond, "piper_under_decode_ms") / p50(base, "piper_under_decode_ms")
        lines.append(
            f"| {cond} | {p50(cond, 'piper_under_decode_ms'):.0f} "
            f"({p95(cond, 'piper_under_decode_ms'):.0f}) | {ratio:.2f} | "
            f"{p50(cond, 'piper_alone_ms'):.0f} ({p95(cond, 'piper_alone_ms'):.0f}) | "
            f"{p50(cond, 'whisper_ms'):.0f} | {p50(cond, 'ttft_ms'):.0f} "
            f"({p95(cond, 'ttft_ms'):.0f}) | {len(calls)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

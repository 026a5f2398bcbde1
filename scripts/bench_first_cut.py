#!/usr/bin/env python3
"""The first sentence's cuts: the default, and the default plus the word cut at two lengths,
on the same questions in one run.

When the endpoint is short, what the user waits for is the first sentence: decoded to its
end, then synthesized whole by Piper. A first sentence with a clause mark is released at it
once it passes ``--first-max-chars``; one without ("Airplanes stay in the air by ...") is cut
before the first phrase-starting word at or past ``--first-phrase-chars``. One with neither
("The history of bicycles dates back thousands of years.") is spoken whole, unless the word
cut (``--first-word-chars``) releases it after its last word a phrase can end with once it
reaches that many characters. Every question runs in each condition, the order alternating
per question and round, each in a fresh conversation, against the real llama-server with
the real Piper voice played in real time (null sink). Reports first_audio_ms p50/p95 with
the ratio to the first condition, the LLM and TTS parts, and the head's length.

    flock /tmp/cpu.lock scripts/bench_first_cut.py [--llm-url URL] [--rounds 2]
        [--out out/first_cut]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from soak import QUESTIONS as SOAK_QUESTIONS  # noqa: E402

from pipeline.metrics import pct  # noqa: E402

QUESTIONS = SOAK_QUESTIONS[:16]  # the soak's questions: everyday requests, varied openings


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    from pipeline.audio_out import RealtimeNullSink
    from pipeline.conversation import Conversation
    from pipeline.events import EventName
    from services.assistant import load_assistant

    assistant = await load_assistant(args.llm_url)
    sink = RealtimeNullSink()
    await sink.open(assistant.tts.sample_rate)
    # One sentence is enough: only the time to the first audio is compared, and the rest of
    # a 4-sentence reply would be seconds of real-time playback per turn.
    base = replace(assistant.config, max_sentences=1)
    configs = {
        "20/15, no word cut": replace(base, first_max_chars=20, first_phrase_chars=15,
                                      first_word_chars=None),
        "+ word cut at 36 (default)": replace(base, first_max_chars=20,
                                              first_phrase_chars=15, first_word_chars=36),
        "+ word cut at 28": replace(base, first_max_chars=20, first_phrase_chars=15,
                                    first_word_chars=28),
    }
    labels = list(configs)
    runner = assistant.runner(sink, Conversation(), config=configs[labels[0]])
    await runner.run(text="Hello there.")  # warm-up: the system prompt's KV is cached
    rows: list[dict[str, Any]] = []
    total = args.rounds * len(QUESTIONS) * len(labels)
    for r in range(args.rounds):
        for i, question in enumerate(QUESTIONS):
            order = labels if (i + r) % 2 == 0 else labels[::-1]
            for label in order:
                runner = assistant.runner(sink, Conversation(), config=configs[label])
                result = await runner.run(text=question)
                first = next((e.data.get("text") for e in result.events
                              if e.name == EventName.SENTENCE), None)
                m = result.metrics
                rows.append({"condition": label, "question": question, "round": r,
                             "error": result.error, "first_audio_ms": m.first_audio_ms,
                             "first_sentence_ms": m.first_sentence_ms,
                             "tts_first_ms": m.tts_first_ms, "first_chunk": first})
                print(f"\r{len(rows)}/{total} turns", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    await sink.close()
    await assistant.close()
    summary = {}
    for label in labels:
        mine = [x for x in rows if x["condition"] == label and x["error"] is None]

        def col(key: str, rows: list[dict[str, Any]] = mine) -> list[float]:
            return [float(x[key]) for x in rows if x[key] is not None]

        heads = [len(str(x["first_chunk"] or "")) for x in mine]
        summary[label] = {
            "turns": len(mine), "errors": sum(x["condition"] == label and x["error"] is not None
                                              for x in rows),
            "first_audio_p50": pct(col("first_audio_ms"), 0.5),
            "first_audio_p95": pct(col("first_audio_ms"), 0.95),
            "first_sentence_p50": pct(col("first_sentence_ms"), 0.5),
            "tts_first_p50": pct(col("tts_first_ms"), 0.5),
            "head_chars_p50": statistics.median(heads) if heads else None,
        }
    return {"summary": summary, "turns": rows}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llm-url", default=os.environ.get("VOICE_LLM_URL", "http://127.0.0.1:8080"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "out/first_cut")
    args = p.parse_args()
    report = asyncio.run(bench(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_cut.json").write_text(json.dumps(report, indent=2) + "\n")
    s = report["summary"]
    base = next(iter(s.values()))["first_audio_p50"]
    lines = ["| first-sentence cut | turns | first audio p50 (p95) | ratio vs the first | "
             "first sentence p50 | TTS first p50 | first chunk chars p50 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for label, x in s.items():
        ratio = (f"{x['first_audio_p50'] / base:.2f}" if base and x["first_audio_p50"]
                 else "-")
        lines.append(f"| {label} | {x['turns']} | {x['first_audio_p50']:.0f} "
                     f"({x['first_audio_p95']:.0f}) ms | {ratio} | "
                     f"{x['first_sentence_p50']:.0f} ms | {x['tts_first_p50']:.0f} ms | "
                     f"{x['head_chars_p50']:.0f} |")
    table = "\n".join(lines)
    (args.out / "first_cut.md").write_text(f"# First-sentence cut\n\n{table}\n")
    print(table)
    print(f"\nreport: {args.out / 'first_cut.md'} (every turn: first_cut.json)")
    return 0 if all(x["errors"] == 0 for x in s.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

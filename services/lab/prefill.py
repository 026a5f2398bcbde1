"""Experiment: prefill cost against prompt length (0, 4 and 12 attached documents).

Prefill computes K and V for every prompt token, so cold TTFT should grow linearly with
``prompt_n``; the least-squares slope is the price of one more prompt token.
"""

from __future__ import annotations

from typing import Any

from pipeline.llm_client import ChatOptions
from services.lab.context import Lab, attach_docs
from services.lab.measure import chat, measure, rounded
from services.lab.stats import fit_line, median

DEFAULT_RUNS = 3
DOC_COUNTS = (0, 4, 12)
INSTRUCTIONS = "You are a helpful assistant. Use the reference notes when they help."
QUESTION = "In one sentence, what do the notes say about tides?"
MAX_TOKENS = 4


async def run(lab: Lab, runs: int = DEFAULT_RUNS) -> dict[str, Any]:
    counts = [n for n in DOC_COUNTS if n <= len(lab.docs)]
    options = ChatOptions(max_tokens=MAX_TOKENS, cache_prompt=False, temperature=0.0,
                          seed=lab.seed)
    lab.tracker.start("prefill: 0/4/12 documents", runs * len(counts))
    points: list[dict[str, Any]] = []
    # Interleaved (0, 4, 12, 0, 4, 12...) so drift from other load on the box spreads over
    # all prompt lengths instead of biasing one of them.
    for _ in range(runs):
        for n in counts:
            system = attach_docs(INSTRUCTIONS, lab.docs[:n])
            m = await measure(lab.client, chat(system, QUESTION), options)
            points.append({"docs": n, "prompt_n": m.timing("prompt_n"),
                           "ttft_ms": rounded(m.ttft_ms),
                           "prompt_ms": rounded(m.timing("prompt_ms"))})
            lab.tracker.advance()
    return summarize(points)


def summarize(points: list[dict[str, Any]]) -> dict[str, Any]:
    usable = [p for p in points if p["prompt_n"] is not None and p["ttft_ms"] is not None]
    section: dict[str, Any] = {"question": QUESTION, "cache_prompt": False, "points": points}
    by_docs = sorted({p["docs"] for p in points})
    section["by_docs"] = [
        {"docs": n,
         "prompt_n": median([p["prompt_n"] for p in points if p["docs"] == n]),
         "ttft_ms": rounded(median([p["ttft_ms"] for p in points if p["docs"] == n])),
         "prompt_ms": rounded(median([p["prompt_ms"] for p in points if p["docs"] == n]))}
        for n in by_docs
    ]
    try:
        fit = fit_line([p["prompt_n"] for p in usable], [p["ttft_ms"] for p in usable])
    except ValueError:
        section.update(ms_per_token=None, intercept_ms=None, r2=None)
        return section
    section.update(ms_per_token=round(fit.slope, 4), intercept_ms=round(fit.intercept, 1),
                   r2=round(fit.r2, 4))
    return section

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
    """Per-length medians and the least-squares line of TTFT on prompt_n.

    The line is fitted to the *fastest* run of each prompt length: on a shared 2-core box
    other work only ever adds time (one busy moment turned a 3 s prefill into 18 s here), so
    the minimum is the best estimate of what prefill itself costs. The fit over every run is
    kept beside it (``*_all_runs``) so the noise stays visible.
    """
    usable = [p for p in points if p["prompt_n"] is not None and p["ttft_ms"] is not None]
    section: dict[str, Any] = {"question": QUESTION, "cache_prompt": False, "points": points}
    by_docs = sorted({p["docs"] for p in points})
    section["by_docs"] = [
        {"docs": n,
         "prompt_n": median([p["prompt_n"] for p in points if p["docs"] == n]),
         "ttft_ms": rounded(median([p["ttft_ms"] for p in points if p["docs"] == n])),
         "min_ttft_ms": rounded(min((p["ttft_ms"] for p in usable if p["docs"] == n),
                                    default=None)),
         "prompt_ms": rounded(median([p["prompt_ms"] for p in points if p["docs"] == n]))}
        for n in by_docs
    ]
    fastest = [min((p for p in usable if p["docs"] == n), key=lambda p: p["ttft_ms"])
               for n in by_docs if any(p["docs"] == n for p in usable)]
    section["fit_on"] = "fastest run per prompt length"
    section.update(_fit(fastest, ""), **_fit(usable, "_all_runs"))
    return section


def _fit(points: list[dict[str, Any]], suffix: str) -> dict[str, Any]:
    try:
        fit = fit_line([p["prompt_n"] for p in points], [p["ttft_ms"] for p in points])
    except ValueError:
        return {f"ms_per_token{suffix}": None, f"intercept_ms{suffix}": None, f"r2{suffix}": None}
    return {f"ms_per_token{suffix}": round(fit.slope, 4),
            f"intercept_ms{suffix}": round(fit.intercept, 1), f"r2{suffix}": round(fit.r2, 4)}

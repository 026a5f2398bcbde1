"""Experiment: time to first token, cold (``cache_prompt: false``), five times.

TTFT = queueing + prefill + the first decode step. Client TTFT minus the server's
``prompt_ms`` is what HTTP, queueing and the first decode step cost on top of prefill.
"""

from __future__ import annotations

from typing import Any

from pipeline.llm_client import ChatOptions
from services.lab.context import Lab
from services.lab.measure import chat, measure, rounded
from services.lab.stats import median

DEFAULT_RUNS = 5
SYSTEM = "You are a helpful assistant. Answer briefly."
QUESTION = "What is the capital of France?"
MAX_TOKENS = 8  # only the first token matters; a few more let the timings chunk arrive soon


async def run(lab: Lab, runs: int = DEFAULT_RUNS) -> dict[str, Any]:
    options = ChatOptions(max_tokens=MAX_TOKENS, cache_prompt=False, temperature=0.0,
                          seed=lab.seed)
    lab.tracker.start("ttft: cold requests", runs)
    rows: list[dict[str, Any]] = []
    for _ in range(runs):
        m = await measure(lab.client, chat(SYSTEM, QUESTION), options)
        prompt_ms = m.timing("prompt_ms")
        rows.append({
            "ttft_ms": rounded(m.ttft_ms), "prompt_n": m.timing("prompt_n"),
            "prompt_ms": rounded(prompt_ms),
            "overhead_ms": rounded(m.ttft_ms - prompt_ms)
            if m.ttft_ms is not None and prompt_ms is not None else None,
        })
        lab.tracker.advance()
    return {
        "question": QUESTION, "max_tokens": MAX_TOKENS, "cache_prompt": False,
        "runs": rows,
        "median_ttft_ms": rounded(median([r["ttft_ms"] for r in rows])),
        "median_prompt_ms": rounded(median([r["prompt_ms"] for r in rows])),
        "median_overhead_ms": rounded(median([r["overhead_ms"] for r in rows])),
    }

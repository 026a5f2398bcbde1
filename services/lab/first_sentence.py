"""Experiment: when the first sentence is complete, and how ``max_tokens`` bounds the reply.

TTS can start speaking at the first sentence; the rest of the reply only adds to the total.
With temperature 0 and a fixed seed every run produces the same text, so the first sentence
should arrive at the same time whatever ``max_tokens`` is, while the total grows with it.
"""

from __future__ import annotations

from typing import Any

from pipeline.llm_client import ChatOptions
from services.lab.context import Lab
from services.lab.measure import chat, measure, rounded
from services.lab.sentences import first_sentence
from services.lab.stats import median

DEFAULT_RUNS = 3
MAX_TOKENS = (32, 64, 128)
# Chosen because SmolLM2-135M answers it at temperature 0 with a ~25-token first sentence and
# then keeps going past 128 tokens, so every max_tokens cap actually cuts the reply.
SYSTEM = "You are a helpful assistant."
QUESTION = "What is a volcano?"


async def run(lab: Lab, runs: int = DEFAULT_RUNS) -> dict[str, Any]:
    lab.tracker.start("first sentence: max_tokens 32/64/128", runs * len(MAX_TOKENS))
    rows: list[dict[str, Any]] = []
    replies: dict[int, str] = {}
    for _ in range(runs):
        for max_tokens in MAX_TOKENS:
            options = ChatOptions(max_tokens=max_tokens, cache_prompt=False, temperature=0.0,
                                  seed=lab.seed)
            m = await measure(lab.client, chat(SYSTEM, QUESTION), options)
            rows.append({
                "max_tokens": max_tokens, "ttft_ms": rounded(m.ttft_ms),
                "first_sentence_ms": rounded(m.first_sentence_ms),
                "first_sentence_by": m.first_sentence_by,
                "total_ms": rounded(m.total_ms), "completion_tokens": m.completion_tokens,
                "finish_reason": m.finish_reason,
                "decode_tps": rounded(m.timing("predicted_per_second")),
            })
            replies[max_tokens] = m.text
            lab.tracker.advance()
    longest = replies.get(max(replies), "") if replies else ""
    return {
        "question": QUESTION, "cache_prompt": False, "temperature": 0.0, "seed": lab.seed,
        "runs": rows, "by_max_tokens": summarize(rows),
        "first_sentence": first_sentence(longest), "reply": longest,
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for max_tokens in sorted({r["max_tokens"] for r in rows}):
        group = [r for r in rows if r["max_tokens"] == max_tokens]
        out.append({"max_tokens": max_tokens,
                    **{key: rounded(median([r[key] for r in group]))
                       for key in ("ttft_ms", "first_sentence_ms", "total_ms",
                                   "completion_tokens", "decode_tps")}})
    return out

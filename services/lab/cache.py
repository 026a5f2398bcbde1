"""Experiment: the KV cache and the prefix rule (``cache_prompt: true``).

(a) one prompt sent twice: the second evaluates ~1 token. A random nonce opens that prompt so
    the slot cannot already hold it from an earlier run or experiment.
(b) a changing "Current time" line at the *start* of the system prompt: the cached prefix
    ends at that line, so every request recomputes nearly everything.
(c) the same line at the *end*: the fixed text before it stays cached.
(b) and (c) each start with one unmeasured priming request: the first request of any prompt
layout is cold by definition; what matters is the steady state of a conversation.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Any

from pipeline.llm_client import ChatOptions
from services.lab.context import Lab, attach_docs
from services.lab.measure import chat, measure

REQUESTS = 3
FIXED_DOCS = 2  # ~250 tokens of fixed prefix, like the 258-token reference prompt (docs/lab.md)
INSTRUCTIONS = "You are a helpful assistant. Use the reference notes when they help."
QUESTION = "Which note talks about bees? Answer in one sentence."
MAX_TOKENS = 8


async def run(lab: Lab) -> dict[str, Any]:
    options = ChatOptions(max_tokens=MAX_TOKENS, cache_prompt=True, temperature=0.0,
                          seed=lab.seed)
    fixed = attach_docs(INSTRUCTIONS, lab.docs[:FIXED_DOCS])
    lab.tracker.start("cache: repeat, volatile first, volatile last", 2 + 2 * (1 + REQUESTS))

    async def send(system: str) -> dict[str, Any]:
        m = await measure(lab.client, chat(system, QUESTION), options)
        lab.tracker.advance()
        return m.cache_row()

    nonce = secrets.token_hex(4)
    repeated = f"Conversation {nonce}.\n{fixed}"
    repeat = {"first": await send(repeated), "second": await send(repeated)}

    # A simulated clock that moves one second per request: the line must differ every time,
    # even when two requests fall within the same wall-clock second.
    start = datetime.now()
    times = [(start + timedelta(seconds=i)).strftime("%H:%M:%S") for i in range(2 + 2 * REQUESTS)]
    first_rows = [await send(f"Current time: {t}\n{fixed}") for t in times[: 1 + REQUESTS]]
    last_rows = [await send(f"{fixed}\nCurrent time: {t}") for t in times[1 + REQUESTS:]]
    return {
        "cache_prompt": True, "nonce": nonce,
        "repeat": repeat,
        "volatile_first": first_rows[1:], "volatile_first_prime": first_rows[0],
        "volatile_last": last_rows[1:], "volatile_last_prime": last_rows[0],
    }

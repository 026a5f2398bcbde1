#!/usr/bin/env python3
"""How cut replies in the history shape SmolLM2's later replies, in one run: every cut
reply kept (before) vs only those with ``MIN_KEPT_WORDS`` heard (the default), and
optionally the ``…`` mark sent to the model.

A barge-in keeps only what was heard of a reply, marked ``…``. The model then sees its own
cut-off replies in the prompt, and a small model copies what it sees. This runs the same
N questions in each condition against the real llama-server, each time as one conversation
in which a third of the replies (the same ones, same seed) are cut after 0-12 words as a
barge-in would cut them, and reports the length of the later replies, how many are short
and how many repeat an earlier one word for word. No audio: only the LLM's behaviour is in
question.

    flock /tmp/cpu.lock scripts/bench_history_cut.py [--llm-url URL] [--turns 120] [--with-mark]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from soak import QUESTIONS  # noqa: E402

from pipeline.conversation import Conversation, Message  # noqa: E402
from pipeline.heard import INTERRUPTED_MARK, MIN_KEPT_WORDS, worth_keeping  # noqa: E402
from pipeline.llm_client import ChatOptions, LlmClient, TokenDelta  # noqa: E402


class MarkedConversation(Conversation):
    """The previous behaviour: cut replies are sent with their mark."""

    def messages_for(self, user_text: str, volatile: str | None = None) -> list[Message]:
        return [{"role": "system", "content": self.system_prompt}, *self.history,
                {"role": "user", "content": user_text}]


Keep = Callable[[str], bool]


def keep_every_word(heard: str) -> bool:
    """The rule before MIN_KEPT_WORDS: any cut reply with a word heard was kept."""
    return bool(heard.strip())


async def conversation(llm: LlmClient, conv: Conversation, turns: int,
                       seed: int, keep: Keep) -> list[str]:
    rng = random.Random(seed)
    replies: list[str] = []
    for i in range(turns):
        sent = conv.messages_for(QUESTIONS[i % len(QUESTIONS)])
        text = ""
        async with llm.stream_chat(sent, ChatOptions(max_tokens=120, temperature=0.3,
                                                     seed=1234)) as stream:
            async for ev in stream:
                if isinstance(ev, TokenDelta):
                    text += ev.text
        replies.append(text)
        kept = text
        if rng.random() < 1 / 3:  # barged in on after 0-12 words
            words = text.split(" ")
            head = " ".join(words[: rng.randint(0, min(12, len(words)))])
            if not keep(head):  # too little heard: the pair is not kept (pipeline/turn.py)
                continue
            kept = head + INTERRUPTED_MARK
        conv.commit(sent, kept)
        print(f"\r{len(replies)}/{turns} replies", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return replies


def summary(replies: list[str]) -> dict[str, Any]:
    late = replies[len(replies) // 2:]
    return {"late_replies": len(late),
            "late_chars_median": statistics.median(len(r) for r in late),
            "late_short": sum(len(r) < 30 for r in late),
            "late_repeats": sum(r in replies[:len(replies) // 2 + i]
                                for i, r in enumerate(late))}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    async with LlmClient(args.llm_url) as llm:
        runs: dict[str, tuple[Conversation, Keep]] = {
            "every cut kept (before)": (Conversation(), keep_every_word),
            f"cut replies kept from {MIN_KEPT_WORDS} words heard (default)":
                (Conversation(), worth_keeping)}
        if args.with_mark:
            runs = {"every cut kept, sent with the mark": (MarkedConversation(),
                                                           keep_every_word), **runs}
        out = {}
        for label, (conv, keep) in runs.items():
            replies = await conversation(llm, conv, args.turns, args.seed, keep)
            out[label] = {**summary(replies), "replies": replies}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llm-url", default=os.environ.get("VOICE_LLM_URL", "http://127.0.0.1:8080"))
    p.add_argument("--turns", type=int, default=120,
                   help="questions per condition (SmolLM2 took ~90 turns to collapse)")
    p.add_argument("--with-mark", action="store_true",
                   help="also run every cut kept and sent to the model with its mark")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "out/history_cut")
    args = p.parse_args()
    report = asyncio.run(bench(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "history_cut.json").write_text(json.dumps(report, indent=2) + "\n")
    print("| cut replies | later replies | median chars | under 30 chars | repeats |\n"
          "|---|---:|---:|---:|---:|")
    for label, r in report.items():
        print(f"| {label} | {r['late_replies']} | {r['late_chars_median']:.0f} | "
              f"{r['late_short']} | {r['late_repeats']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""A long conversation with barge-ins, and what SmolLM2 makes of it, in one run: every cut
reply kept without a repetition penalty (before), only cut replies with ``MIN_KEPT_WORDS``
heard, and that plus the repetition penalty (the default); optionally the ``…`` mark sent
to the model.

The same N questions (24, cycled) in each condition against the real llama-server, each
time as one conversation in which a third of the replies (the same ones, same seed) are cut
after 0-12 words as a barge-in would cut them. The later half is scored: median length,
short replies, replies that loop (one 5-word run twice), replies that copy another
question's answer (an 8-word run in common) and replies on their question's topic. No
audio: only the LLM's behaviour is in question.

    flock /tmp/cpu.lock scripts/bench_history_cut.py [--llm-url URL] [--turns 48] [--with-mark]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
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
from pipeline.turn import TurnConfig  # noqa: E402

DEFAULTS = TurnConfig()  # the product's sampling: temperature, seed, repetition penalty


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
                       seed: int, keep: Keep, repeat_penalty: float | None) -> list[str]:
    rng = random.Random(seed)
    replies: list[str] = []
    for i in range(turns):
        sent = conv.messages_for(QUESTIONS[i % len(QUESTIONS)])
        text = ""
        opts = ChatOptions(max_tokens=120, temperature=DEFAULTS.temperature,
                           seed=DEFAULTS.seed, repeat_penalty=repeat_penalty,
                           repeat_last_n=DEFAULTS.repeat_last_n)
        async with llm.stream_chat(sent, opts) as stream:
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


_WORD = re.compile(r"[a-z']+")
_PLAIN = frozenset("""what when where which while with your that this have from about does
good best make should tell there their them they then than into over like some""".split())


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    w = words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def loops(reply: str, n: int = 5) -> bool:
    """The reply says one n-word run twice: "You can think of a way ... You can think of"."""
    w = words(reply)
    runs = [tuple(w[i:i + n]) for i in range(len(w) - n + 1)]
    return len(runs) != len(set(runs))


def on_topic(question: str, reply: str) -> bool:
    """The reply names something the question asked about (a content word of 4+ letters,
    singular or plural): "honey" for "How do bees make honey?"."""
    said = set(words(reply))
    keys = {w for w in words(question) if len(w) >= 4 and w not in _PLAIN}
    return any({k, k.removesuffix("s"), k + "s"} & said for k in keys)


def summary(questions: list[str], replies: list[str]) -> dict[str, Any]:
    """The later half of the conversation: how long, looping, copied from an earlier reply
    to another question (an 8-word run in common), and on the question's topic."""
    half = len(replies) // 2
    late = list(zip(questions[half:], replies[half:], strict=True))

    def copied(i: int, question: str, reply: str) -> bool:
        mine = ngrams(reply, 8)
        return any(mine & ngrams(r, 8) for q, r in zip(questions[:half + i],
                                                       replies[:half + i], strict=True)
                   if q != question)

    return {"late_replies": len(late),
            "late_chars_median": statistics.median(len(r) for _, r in late),
            "late_short": sum(len(r) < 30 for _, r in late),
            "late_looping": sum(loops(r) for _, r in late),
            "late_copied": sum(copied(i, q, r) for i, (q, r) in enumerate(late)),
            "late_on_topic": sum(on_topic(q, r) for q, r in late)}


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    async with LlmClient(args.llm_url) as llm:
        penalty = DEFAULTS.repeat_penalty
        runs: dict[str, tuple[Conversation, Keep, float | None]] = {
            "every cut kept, no repetition penalty (before)":
                (Conversation(), keep_every_word, None),
            f"kept from {MIN_KEPT_WORDS} words heard, no repetition penalty":
                (Conversation(), worth_keeping, None),
            f"kept from {MIN_KEPT_WORDS} words heard, repeat penalty {penalty} (default)":
                (Conversation(), worth_keeping, penalty)}
        if args.with_mark:
            runs = {"every cut kept, sent with the mark, no penalty":
                    (MarkedConversation(), keep_every_word, None), **runs}
        out = {}
        for label, (conv, keep, repeat_penalty) in runs.items():
            replies = await conversation(llm, conv, args.turns, args.seed, keep,
                                         repeat_penalty)
            questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(len(replies))]
            out[label] = {**summary(questions, replies), "replies": replies}
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llm-url", default=os.environ.get("VOICE_LLM_URL", "http://127.0.0.1:8080"))
    p.add_argument("--turns", type=int, default=48,
                   help="questions per condition; the later half is scored (without a "
                   "repetition penalty SmolLM2 collapsed within ~15) (default %(default)s)")
    p.add_argument("--with-mark", action="store_true",
                   help="also run every cut kept and sent to the model with its mark")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--out", type=Path, default=ROOT / "out/history_cut")
    args = p.parse_args()
    report = asyncio.run(bench(args))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "history_cut.json").write_text(json.dumps(report, indent=2) + "\n")
    print("| condition | later replies | median chars | under 30 chars | looping | "
          "copied from another answer | on the question's topic |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for label, r in report.items():
        print(f"| {label} | {r['late_replies']} | {r['late_chars_median']:.0f} | "
              f"{r['late_short']} | {r['late_looping']} | {r['late_copied']} | "
              f"{r['late_on_topic']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

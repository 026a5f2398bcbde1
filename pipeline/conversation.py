"""Conversation history and the cache-friendly prompt.

llama-server reuses a slot's KV cache for the longest common *token prefix from the
start* of the prompt. So the prompt is laid out fixed-first: the system prompt, then the
history exactly as it was sent and generated, then the new user message, and anything
that changes per turn (the time, say) at the very end. One changed token near the front
would force every token after it to be recomputed on every turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.heard import INTERRUPTED_MARK

DEFAULT_SYSTEM_PROMPT = (
    "You are a friendly voice assistant. Your answers are spoken aloud, so answer in two "
    "to four short, plain sentences. Do not use lists, headings or markdown."
)

Message = dict[str, str]


@dataclass
class Conversation:
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    history: list[Message] = field(default_factory=list)
    max_messages: int = 40  # oldest pairs dropped beyond this (breaks the prefix once, rarely)

    def messages_for(self, user_text: str, volatile: str | None = None) -> list[Message]:
        """The prompt for a new user message; ``volatile`` text goes last of all.

        A reply cut by a barge-in is kept marked with ``…`` (for whoever reads the
        history) but sent without the mark: with it, SmolLM2 took the marked replies for
        a pattern and answered with the same short cut-off line turn after turn (measured:
        30 turns after 60 with a third cut, mean reply 55 characters and the same answer
        repeated, against 111 and varied without the mark)."""
        user = user_text if not volatile else f"{user_text}\n\n({volatile})"
        history = [{**m, "content": m["content"].removesuffix(INTERRUPTED_MARK).rstrip()}
                   if m["role"] == "assistant" and m["content"].endswith(INTERRUPTED_MARK)
                   else m for m in self.history]
        return [{"role": "system", "content": self.system_prompt}, *history,
                {"role": "user", "content": user}]

    def commit(self, sent: list[Message], assistant_raw: str) -> None:
        """Record a finished turn. ``sent`` is the prompt as sent (its last message is
        the user's) and ``assistant_raw`` the model's text token for token, so the next
        prompt starts with exactly the tokens the slot already holds."""
        self.history.extend([sent[-1], {"role": "assistant", "content": assistant_raw}])
        while len(self.history) > self.max_messages:
            del self.history[:2]

    def amend_last_reply(self, assistant_raw: str) -> bool:
        """Replace the last assistant message (a client said it heard less of it). Only
        the tokens from that message on lose their cached prefix."""
        if not self.history or self.history[-1]["role"] != "assistant":
            return False
        self.history[-1] = {"role": "assistant", "content": assistant_raw}
        return True

    def drop_last_turn(self) -> bool:
        """Forget the last user/assistant pair (a client said none of the reply was heard)."""
        if len(self.history) < 2 or self.history[-1]["role"] != "assistant":
            return False
        del self.history[-2:]
        return True

    def trim_oldest(self, keep_fraction: float) -> int:
        """Context overflow: drop the oldest user/assistant pairs, never the system prompt,
        until the history holds at most ``keep_fraction`` of its characters (at least one
        pair goes). Returns how many messages were dropped (0: nothing left to drop)."""
        target = sum(len(m["content"]) for m in self.history) * max(keep_fraction, 0.0)
        dropped = 0
        while self.history and (
                dropped == 0 or sum(len(m["content"]) for m in self.history) > target):
            del self.history[:2]
            dropped += 2
        return dropped

    def to_json(self) -> dict[str, object]:
        return {"system_prompt": self.system_prompt, "history": list(self.history)}

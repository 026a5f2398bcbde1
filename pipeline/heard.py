"""What the user actually heard of a reply, exact to the sample.

The history must keep the model's raw text token for token (anything else breaks the KV
prefix at that message), but after a barge-in it must not claim the assistant said what
was never played. So the raw text is cut inside the sentence that was playing, in
proportion to the samples played, back to a word boundary, and marked as interrupted.
Everything before the cut is still the raw text, so the next turn reuses the prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

# Short and speech-like: the small model copied a bracketed "[interrupted]" into later
# replies; an ellipsis reads as "cut off" to it and to a person reading the history.
INTERRUPTED_MARK = "…"

# A cut reply is kept in the history only when at least this many of its words were
# heard. Fewer ("The", "The key to") tell the next turn nothing, and SmolLM2 copies them:
# in a serve soak kept "The…" cuts came back glued to later replies ("Thehistory of the
# bicycle…", "Thekey to"). The one-conversation collapse of those soaks was the sampling,
# not this (TurnConfig.repeat_penalty; scripts/bench_history_cut.py runs both).
MIN_KEPT_WORDS = 4


def worth_keeping(heard: str) -> bool:
    """Whether a cut reply of which ``heard`` was heard goes into the history (its
    question with it); otherwise the pair is dropped, as if the turn never happened."""
    return len(heard.split()) >= MIN_KEPT_WORDS


@dataclass
class _Sentence:
    text: str
    start: int  # span in the raw text (-1 when the splitter's text was not found in it)
    end: int
    samples: int | None = None  # synthesized length
    played: int = 0


class HeardText:
    def __init__(self) -> None:
        self.raw = ""
        self.sentences: list[_Sentence] = []
        self._cursor = 0

    def add_raw(self, text: str) -> None:
        self.raw += text

    def add_sentence(self, text: str) -> int:
        """Register a released sentence; returns its index."""
        start = self.raw.find(text, self._cursor)
        if start < 0:
            self.sentences.append(_Sentence(text, -1, -1))
        else:
            self._cursor = start + len(text)
            self.sentences.append(_Sentence(text, start, self._cursor))
        return len(self.sentences) - 1

    def set_audio(self, index: int, samples: int) -> None:
        self.sentences[index].samples = samples

    def set_played(self, index: int, samples: int) -> None:
        self.sentences[index].played = samples

    def audio_samples(self) -> int:
        """Samples of reply audio synthesized so far, all sentences together."""
        return sum(s.samples or 0 for s in self.sentences)

    def cut_at(self, played: int) -> bool:
        """A client that plays the audio itself stopped after ``played`` samples of the
        whole reply: spread them over the sentences in order (never more than each
        sentence had already played here). True when that cuts the reply short."""
        if played >= self.audio_samples():
            return False
        left = max(played, 0)
        for s in self.sentences:
            s.played = min(s.played, left)
            left -= min(s.samples or 0, left)
        return True

    def reply(self, complete: bool = True) -> str:
        """The raw reply for the history: all of it when the model finished, else up to
        the end of the last released sentence (what was cut off was never spoken)."""
        if complete or not self.sentences:
            return self.raw
        ends = [s.end for s in self.sentences if s.end >= 0]
        return self.raw[: max(ends)] if ends else self.raw

    def _heard_cut(self) -> int:
        """Position in the raw text where hearing stopped."""
        cut = 0
        for s in self.sentences:
            if s.samples is None or s.start < 0:
                break
            if s.played >= s.samples:
                cut = s.end
                continue
            if s.played > 0:
                chars = int(len(s.text) * s.played / max(s.samples, 1))
                head = s.text[:chars]
                if " " in head:  # back to a word boundary: no half-words in the history
                    head = head[: head.rfind(" ")]
                else:
                    head = ""
                cut = s.start + len(head) if head else cut
            break  # playback stopped inside this sentence
        return cut

    def heard_raw(self) -> str:
        """Raw text up to where playback stopped, marked as interrupted."""
        return self.raw[: self._heard_cut()].rstrip() + INTERRUPTED_MARK

    def heard_text(self) -> str:
        return self.raw[: self._heard_cut()].strip()

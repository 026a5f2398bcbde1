"""An endpoint that listens: how long to wait for more speech, given what was said so far.

A fixed end-of-speech silence is a bad compromise. Short (200-300 ms), it cuts people off in
the pauses they make mid-sentence ("I'd like to know about the ... history of bicycles");
long (600-800 ms, what most voice frameworks ship), every turn starts that much later.
People resolve it by listening: "Why is the sky blue?" is finished, "and the" is not.

``EndpointPolicy.wait_ms(transcript)`` is that judgement on the speculative transcript
(Whisper's text of the utterance so far, taken at the first short pause): pure, no I/O,
tested directly. The live turn-taker then ends the utterance once the silence since the
last voiced window reaches it, and cancels the speculation if speech resumes first.

Rules, in order (the first that matches decides):
1. empty or a filler only ("um", "uh") -> ``incomplete_ms``: nothing usable yet.
2. the text ends with a comma, colon, dash, ellipsis or an opening bracket -> incomplete.
3. the last word is a connective, article, preposition, quantifier or auxiliary ("and",
   "the", "of", "to", "many", "is", "because"...) -> incomplete, whatever punctuation
   Whisper put after it: it writes "What is the best way to?" for a fragment (measured,
   docs/live.md). "What are you thinking of?" waits longer than it needs to; that costs
   latency, not a cut-off. A number (a figure that may still be being read: "twenty",
   "3") is incomplete too, unless ``numbers_can_end`` and it ends a question ("What is
   seven times eight?") or a statement whose voice fell ("Set an alarm for 7." said
   low); then the rules below decide.
4. Whisper was unsure of the words (average log-probability below ``min_logprob``, when
   the caller knows it) -> ``default_ms``: misheard fragments come out as confident-looking
   sentences ("My thigh team mat."). Or it was unsure of the last word alone (its
   probability below ``min_word_prob``): a fragment's last word, cut off by the pause or
   said as if final, is misheard into a word that ends a sentence ("What should I cook
   if I only have" -> "... if I only harm?", 0.13; "... more about the" -> "... about
   them.", 0.2), while the words before it are clear and the average stays high.
5. a question mark, exclamation or full stop after at least ``min_words`` words ->
   ``complete_ms``; with fewer words Whisper's punctuation means little ("How many?").
   But a statement ("." or "!") whose voice at the pause did not fall (measured by the
   caller with ``pipeline.prosody``: held level, a speaker keeping the turn) ->
   ``default_ms``: Whisper writes "I would like to know more about them." for "... about
   the". Questions are left to the text: they end level or high when finished too.
6. anything else -> ``default_ms``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from pipeline.prosody import ProsodyCue
from pipeline.splitter_data import CONTINUES as _CONTINUES

_FILLERS = frozenset({"um", "uh", "er", "erm", "hmm", "mm", "ah", "oh"})

_NUMBER_WORDS = frozenset("""
zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen
fifteen sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy
eighty ninety hundred thousand million billion point
""".split())

_OPEN_END = re.compile(r"(?:[,;:\-–—(\[]|\.\.\.|…)\s*$")
_WORD = re.compile(r"[\w']+")


class EndpointReason(StrEnum):
    """Which rule decided; recorded in the events so a false endpoint can be traced."""

    NOTHING = "nothing_yet"
    OPEN_PUNCTUATION = "open_punctuation"
    CONTINUING_WORD = "continuing_word"
    NUMBER = "number"
    QUESTION = "question"
    UNSURE = "asr_unsure"
    WORD_UNSURE = "last_word_unsure"
    PITCH_HELD = "pitch_held"
    SENTENCE = "sentence"
    DEFAULT = "default"


# The words make a whole question or sentence: the wait after them is ``complete_ms``.
FINISHED = frozenset({EndpointReason.QUESTION, EndpointReason.SENTENCE})


@dataclass(frozen=True)
class EndpointDecision:
    wait_ms: int
    reason: EndpointReason
    learned: bool = False  # the wait is the user's own pauses' (pipeline/pauses.py)

    @property
    def looks_finished(self) -> bool:
        """The words make a whole question or sentence: the wait was ``complete_ms``."""
        return self.reason in FINISHED


@dataclass(frozen=True)
class EndpointPolicy:
    """Silence to wait after the speculative transcript before the turn is the user's end.

    Defaults chosen on the tune split of ``scripts/bench_endpoint.py`` (docs/live.md): the
    least wait with no false endpoint there. Pauses inside a sentence ran 300-900 ms, so
    "incomplete" and "unsure" wait past them. A complete sentence waited 500 ms, not 250:
    the reply's first audio was not ready much sooner anyway (the 200 ms pause plus the
    pipeline's time to first audio), so the longer wait was mostly hidden, and it halved
    the false endpoints. 450 since session 21: on the faster hosts the reply is ready ~450
    ms after the last word, so the 500 ms wait, not the pipeline, set the latency; 450 took
    ~50 ms off mouth to ear on the audio (bench_live) for one more false endpoint per
    held-out split where the reply is ready 250 ms after the pause, none at 300.
    """

    complete_ms: int = 450
    default_ms: int = 1000
    incomplete_ms: int = 1100
    min_words: int = 3
    min_logprob: float = -0.5  # Whisper's average token log-probability
    # Whisper's probability of the last word: 0.5, the usual mark of a low-confidence
    # word, not fitted to the corpus (what it costs: docs/live.md).
    min_word_prob: float = 0.5
    # A statement counts as finished when its pitch ended this far under the speaker's
    # median (semitones; -1 to -3 gave the same result on the tune split).
    final_fall_st: float = -2.0
    # Let a number end a finished question, or a statement said with a falling voice.
    # Off: on the corpus's numbers split it saved ~190 ms on requests ending on a number
    # and cut 3-4 of 32 paused ones ("What is 12?" ... "times eleven?"; docs/live.md).
    numbers_can_end: bool = False

    def decide(self, transcript: str, avg_logprob: float | None = None,
               prosody: ProsodyCue | None = None,
               last_word_prob: float | None = None) -> EndpointDecision:
        text = transcript.strip()
        words = [w.lower() for w in _WORD.findall(text)]
        if not words or all(w in _FILLERS for w in words):
            return EndpointDecision(self.incomplete_ms, EndpointReason.NOTHING)
        if _OPEN_END.search(text):
            return EndpointDecision(self.incomplete_ms, EndpointReason.OPEN_PUNCTUATION)
        last = words[-1]
        if last in _CONTINUES:
            return EndpointDecision(self.incomplete_ms, EndpointReason.CONTINUING_WORD)
        if (last.isdigit() or last in _NUMBER_WORDS) and not self._number_ends(
                text, len(words), prosody):
            return EndpointDecision(self.incomplete_ms, EndpointReason.NUMBER)
        if avg_logprob is not None and avg_logprob < self.min_logprob:
            # Whisper was unsure of the words: its punctuation says even less.
            return EndpointDecision(self.default_ms, EndpointReason.UNSURE)
        if last_word_prob is not None and last_word_prob < self.min_word_prob:
            return EndpointDecision(self.default_ms, EndpointReason.WORD_UNSURE)
        if text.endswith(("?", "!", ".")) and len(words) >= self.min_words:
            if text.endswith("?"):
                return EndpointDecision(self.complete_ms, EndpointReason.QUESTION)
            # A statement ends low; questions end level or high, so the pitch only
            # judges statements (measured: docs/live.md).
            if prosody is not None and prosody.sounds_final(self.final_fall_st) is False:
                return EndpointDecision(self.default_ms, EndpointReason.PITCH_HELD)
            reason = EndpointReason.SENTENCE if text.endswith(".") else EndpointReason.QUESTION
            return EndpointDecision(self.complete_ms, reason)
        return EndpointDecision(self.default_ms, EndpointReason.DEFAULT)

    def _number_ends(self, text: str, words: int, prosody: ProsodyCue | None) -> bool:
        if not self.numbers_can_end or words < self.min_words:
            return False
        if text.endswith("?"):
            return True
        return (text.endswith((".", "!")) and prosody is not None
                and prosody.sounds_final(self.final_fall_st) is True)

    def wait_ms(self, transcript: str, avg_logprob: float | None = None,
                prosody: ProsodyCue | None = None,
                last_word_prob: float | None = None) -> int:
        return self.decide(transcript, avg_logprob, prosody, last_word_prob).wait_ms

"""The speaker's own pauses: a longer wait after a finished-looking sentence for a user who
has shown that they go on after one.

The endpoint policy waits ``complete_ms`` (450) after words that make a whole question or
sentence. For most turns that is right, but some people pause after a whole request and
then add to it ("Call my sister." [700 ms] "after lunch."). Up to the pause, neither the
words, nor Whisper's confidence, nor the pitch tell that from the same request said alone
(docs/live.md, "Why ≤ 2 % and ≤ 900 ms do not meet"). What does tell it is that the same
user did it before: pausing habits are personal, and a listener who has cut someone off
once waits longer for them the next time.

``PauseHabit`` keeps, for each of the user's last ``memory`` utterances, the longest pause
they went on after although the words before it looked finished:

- a pause judged ``complete_ms`` (a question or a statement) that the user spoke again
  after (``SpeechResumed.pause_ms``): the speculation was dropped, nothing was heard, but
  it was a near miss;
- the silence before the voice that cut a reply whose words were carried into the next
  turn (a false endpoint that happened: pipeline/rejoin.py).

The wait after finished-looking words is then that pause plus ``margin_ms``, never under
the policy's own and never over its ``default_ms``. A user who never does it keeps the
policy's 500 ms; one who stops doing it gets it back after ``memory`` utterances.
Pure bookkeeping, no clock: fed by ``pipeline/live.py`` and by ``scripts/bench_endpoint.py``
(which measures what it buys, docs/live.md).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace

from pipeline.endpoint import EndpointPolicy

MEMORY = 8  # utterances
MARGIN_MS = 150.0


@dataclass
class PauseHabit:
    memory: int = MEMORY
    margin_ms: float = MARGIN_MS
    # Per finished utterance, its longest pause after finished-looking words (0: none).
    _recent: deque[float] = field(default_factory=deque)
    _current: float = 0.0  # the utterance in progress

    def went_on(self, pause_ms: float) -> None:
        """The user spoke again after ``pause_ms`` of silence that followed words that
        looked finished."""
        self._current = max(self._current, pause_ms)

    def utterance_ended(self) -> None:
        self._recent.append(self._current)
        self._current = 0.0
        while len(self._recent) > self.memory:
            self._recent.popleft()

    @property
    def longest_ms(self) -> float:
        """The longest such pause in the remembered utterances and the current one."""
        return max([self._current, *self._recent])

    def complete_ms(self, policy: EndpointPolicy) -> int:
        """The wait after finished-looking words for this user."""
        learned = round(self.longest_ms + self.margin_ms) if self.longest_ms > 0 else 0
        return max(policy.complete_ms, min(policy.default_ms, learned))

    def policy(self, policy: EndpointPolicy) -> EndpointPolicy:
        """``policy`` with this user's wait after finished-looking words."""
        complete = self.complete_ms(policy)
        return policy if complete == policy.complete_ms else replace(policy,
                                                                     complete_ms=complete)

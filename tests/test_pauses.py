"""The user's own pauses lengthen the wait after finished-looking words (pipeline/pauses.py)."""

from __future__ import annotations

from pipeline.endpoint import EndpointPolicy
from pipeline.pauses import PauseHabit

POLICY = EndpointPolicy()


def test_a_user_who_never_went_on_keeps_the_policy() -> None:
    habit = PauseHabit()
    for _ in range(3):
        habit.utterance_ended()
    assert habit.policy(POLICY) is POLICY
    assert habit.policy(POLICY).decide("Call my sister.").wait_ms == POLICY.complete_ms


def test_going_on_after_a_pause_waits_that_pause_and_a_margin_up_to_the_default() -> None:
    habit = PauseHabit(margin_ms=150)
    habit.went_on(700)
    assert habit.complete_ms(POLICY) == 850  # already for the rest of this utterance
    habit.utterance_ended()
    assert habit.policy(POLICY).decide("Call my sister.").wait_ms == 850
    # Only the wait after finished-looking words: the others are the policy's own.
    assert habit.policy(POLICY).decide("Thanks.").wait_ms == POLICY.default_ms
    assert habit.policy(POLICY).decide("Tell me about the").wait_ms == POLICY.incomplete_ms
    habit.went_on(2000)  # e.g. the silence before the voice that cut a reply
    assert habit.complete_ms(POLICY) == POLICY.default_ms
    short = PauseHabit(margin_ms=150)
    short.went_on(250)  # shorter than the policy's own wait: it stays
    assert short.policy(POLICY) is POLICY


def test_the_habit_is_forgotten_after_memory_utterances_without_it() -> None:
    habit = PauseHabit(memory=3, margin_ms=100)
    habit.went_on(800)
    habit.utterance_ended()
    for expected in (900, 900, POLICY.complete_ms):
        habit.utterance_ended()
        assert habit.complete_ms(POLICY) == expected
    assert habit.longest_ms == 0


def test_a_longer_base_wait_is_never_shortened() -> None:
    habit = PauseHabit(margin_ms=100)
    habit.went_on(500)
    assert habit.complete_ms(EndpointPolicy(complete_ms=800)) == 800

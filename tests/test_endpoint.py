"""The endpoint policy: how long to wait after what the user has said so far."""

from __future__ import annotations

import pytest

from pipeline.endpoint import EndpointPolicy, EndpointReason

POLICY = EndpointPolicy(complete_ms=250, default_ms=600, incomplete_ms=1100)



@pytest.mark.parametrize(("text", "reason"), [
    ("Why is the sky blue?", EndpointReason.QUESTION),
    # Whisper writes "?" after fragments: the last word decides (a finished question that
    # ends in "of" only waits longer)
    ("What is the best way to?", EndpointReason.CONTINUING_WORD),
    ("What are you thinking of?", EndpointReason.CONTINUING_WORD),
    ("How many?", EndpointReason.CONTINUING_WORD),
    ("Tell me a joke!", EndpointReason.QUESTION),
    ("Tell me how to make a cup of tea.", EndpointReason.SENTENCE),
    ("I'd like to know about the", EndpointReason.CONTINUING_WORD),
    ("I'd like to know about the.", EndpointReason.CONTINUING_WORD),  # Whisper's stop
    ("Sleep tips and", EndpointReason.CONTINUING_WORD),
    ("Because", EndpointReason.CONTINUING_WORD),
    ("My number is 3", EndpointReason.NUMBER),
    ("It costs twenty", EndpointReason.NUMBER),
    ("First, boil the water,", EndpointReason.OPEN_PUNCTUATION),
    ("Well...", EndpointReason.OPEN_PUNCTUATION),
    ("Hmm", EndpointReason.NOTHING),
    ("", EndpointReason.NOTHING),
    ("Thanks.", EndpointReason.DEFAULT),  # two words and a stop: Whisper stops everything
    ("Yes?", EndpointReason.DEFAULT),
    ("Bicycles", EndpointReason.DEFAULT),
])
def test_reasons(text: str, reason: EndpointReason) -> None:
    assert POLICY.decide(text).reason == reason


def test_complete_waits_less_than_default_less_than_incomplete() -> None:
    complete = POLICY.wait_ms("Why is the sky blue?")
    default = POLICY.wait_ms("Bicycles")
    incomplete = POLICY.wait_ms("Tell me about the")
    assert complete < default < incomplete
    assert (complete, default, incomplete) == (250, 600, 1100)


def test_the_policy_is_configurable() -> None:
    policy = EndpointPolicy(complete_ms=100, default_ms=200, incomplete_ms=300, min_words=1)
    assert policy.wait_ms("Thanks.") == 100
    assert policy.wait_ms("and") == 300


def test_an_unsure_transcript_waits_the_default() -> None:
    assert POLICY.decide("My thigh team mat.", avg_logprob=-0.9).reason == EndpointReason.UNSURE
    assert POLICY.decide("Why is the sky blue?", avg_logprob=-0.2).wait_ms == 250
    assert POLICY.decide("Why is the sky blue?").wait_ms == 250  # confidence unknown

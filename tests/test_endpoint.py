"""The endpoint policy: how long to wait after what the user has said so far."""

from __future__ import annotations

import numpy as np
import pytest
from fake_llm import FakeLlm, Reply
from test_live import RecordingSegmenter, until
from test_prosody import voice
from test_turn import SENTENCES, FakeAsr, make_runner, tokens

from pipeline.asr import last_word_probability, token_probability
from pipeline.early_asr import AsrResult
from pipeline.endpoint import EndpointPolicy, EndpointReason
from pipeline.live import LiveTurnTaker
from pipeline.llm_client import LlmClient
from pipeline.mic import SpeechPause, SpeechResumed
from pipeline.prosody import ProsodyCue

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


def test_a_misheard_last_word_waits_the_default() -> None:
    # "... if I only have" [pause]: Whisper heard "harm?", sure of every word but the last
    text = "What should I cook for dinner if I only harm?"
    unsure = POLICY.decide(text, avg_logprob=-0.26, last_word_prob=0.13)
    assert unsure.reason == EndpointReason.WORD_UNSURE and unsure.wait_ms == POLICY.default_ms
    assert POLICY.decide(text, -0.26, last_word_prob=0.97).reason == EndpointReason.QUESTION
    assert POLICY.decide(text, -0.26).reason == EndpointReason.QUESTION  # not known: text
    # an incomplete text keeps its longer wait, whatever the last word's probability
    assert POLICY.decide("Tell me about the", -0.2, last_word_prob=0.1).reason \
        == EndpointReason.CONTINUING_WORD
    # the bar is a setting
    assert EndpointPolicy(min_word_prob=0.1).decide(text, -0.26, last_word_prob=0.13).reason \
        == EndpointReason.QUESTION


def test_the_last_word_is_its_least_likely_token_before_the_punctuation() -> None:
    pieces = [" What", " should", " I", " cook", " if", " I", " only", " h", "arm", "?"]
    probs = [0.9, 0.95, 0.99, 0.9, 0.9, 0.99, 0.98, 0.4, 0.13, 0.8]
    assert last_word_probability(pieces, probs) == 0.13
    assert last_word_probability([" Call", " my", " sister", "."], [0.9, 0.9, 0.98, 0.3]) \
        == 0.98  # the full stop's probability is not the word's
    assert last_word_probability([" Hi", "!", "\"", ""], [0.7, 0.5, 0.5, 0.5]) == 0.7
    assert last_word_probability(["?"], [0.5]) is None
    assert last_word_probability([], []) is None
    assert last_word_probability(["Yes"], [0.6]) == 0.6  # a first word without a space


def test_token_probability_is_a_softmax() -> None:
    logits = np.log(np.array([0.1, 0.2, 0.7], dtype=np.float32)) + 40.0  # raw, unnormalised
    assert token_probability(logits, 2) == pytest.approx(0.7)
    assert token_probability(np.array([1000.0, 0.0]), 1) == pytest.approx(0.0)


HELD = ProsodyCue(fall_st=-0.5, slope_st_s=-3.0, decay_db=0.0, voiced_frames=80)
FALLEN = ProsodyCue(fall_st=-4.0, slope_st_s=-15.0, decay_db=-4.0, voiced_frames=80)
TOO_SHORT = ProsodyCue(fall_st=-0.5, slope_st_s=0.0, decay_db=0.0, voiced_frames=3)


def test_a_complete_looking_statement_said_with_a_held_pitch_waits_the_default() -> None:
    # Whisper hears "I would like to know more about the" as a finished sentence; the voice
    # did not fall, so the speaker was holding the turn.
    text = "I would like to know more about them."
    held = POLICY.decide(text, -0.2, HELD)
    assert held.reason == EndpointReason.PITCH_HELD and held.wait_ms == POLICY.default_ms
    assert POLICY.decide(text, -0.2, FALLEN).wait_ms == 250
    # too little voice to judge: the text decides alone
    assert POLICY.decide(text, -0.2, TOO_SHORT).wait_ms == 250


def test_a_question_is_left_to_the_text() -> None:
    # finished questions end level or high: a held pitch says nothing about them
    assert POLICY.decide("Why is the sky blue?", -0.2, HELD).reason == EndpointReason.QUESTION


def test_a_number_ends_a_turn_only_when_asked_to_and_the_question_or_voice_says_so() -> None:
    never = POLICY
    can = EndpointPolicy(complete_ms=250, default_ms=600, incomplete_ms=1100,
                         numbers_can_end=True)
    question = "Can you set an alarm for 7?"
    assert never.decide(question, -0.2).reason == EndpointReason.NUMBER
    assert can.decide(question, -0.2).reason == EndpointReason.QUESTION
    statement = "Set an alarm for 7."
    assert never.decide(statement, -0.2, FALLEN).reason == EndpointReason.NUMBER
    assert can.decide(statement, -0.2, FALLEN).reason == EndpointReason.SENTENCE
    # a figure still being read: the voice held, or too little of it, or no stop at all
    assert can.decide(statement, -0.2, HELD).reason == EndpointReason.NUMBER
    assert can.decide(statement, -0.2, TOO_SHORT).reason == EndpointReason.NUMBER
    assert can.decide(statement, -0.2).reason == EndpointReason.NUMBER
    assert can.decide("Set an alarm for seven", -0.2, FALLEN).reason == EndpointReason.NUMBER
    # too few words for Whisper's "?" to mean much, and Whisper unsure: as for any question
    assert can.decide("For 7?", -0.2).reason == EndpointReason.NUMBER
    assert can.decide(question, -0.9).reason == EndpointReason.UNSURE


def test_the_pitch_never_shortens_an_incomplete_text() -> None:
    assert POLICY.decide("Tell me about the", -0.2, FALLEN).reason \
        == EndpointReason.CONTINUING_WORD
    assert POLICY.decide("Remind me to buy milk,", -0.2, FALLEN).reason \
        == EndpointReason.OPEN_PUNCTUATION
    assert POLICY.decide("Bicycles", -0.2, FALLEN).reason == EndpointReason.DEFAULT


def test_the_fall_threshold_is_a_setting() -> None:
    strict = EndpointPolicy(complete_ms=250, default_ms=600, final_fall_st=-5.0)
    assert strict.decide("Tell me a joke.", -0.2, FALLEN).reason == EndpointReason.PITCH_HELD


@pytest.fixture
async def llm():
    async with FakeLlm(Reply(tokens=tokens(*SENTENCES), token_delay=0.01)) as fake:
        async with LlmClient(fake.url) as client:
            yield fake, client


async def test_the_live_path_judges_the_pitch_of_the_pause_audio(llm) -> None:
    """LiveTurnTaker measures the voice before the pause and hands it to the policy: the
    same complete-looking statement waits the default when said with a level pitch, the short
    wait when the pitch fell."""
    fake, client = llm
    waits = []
    for audio in (voice(160, 158), voice(160, 110)):  # held, then fallen
        runner = await make_runner(fake, client, max_sentences=1)
        runner.asr = FakeAsr("Tell me how to make a cup of tea.")
        seg = RecordingSegmenter()
        live = LiveTurnTaker(runner, seg, on_turn=lambda turn: None)
        live.on_segment(SpeechPause(audio, 0, audio.size, audio.size / 16, audio.size + 3200))
        await until(lambda seg=seg: bool(seg.ends))
        waits.append(seg.ends[0])
        live.on_segment(SpeechResumed(audio.size + 3200, 300.0))
        await live.close()
    assert waits == [live.policy.default_ms, live.policy.complete_ms]


class UnsureOfTheLastWord(FakeAsr):
    """Whisper's confidence as ``pipeline.asr.WhisperAsr`` reports it."""

    def __init__(self, text: str, last_word_prob: float) -> None:
        super().__init__(text)
        self.last_word_prob = last_word_prob

    def recognize(self, audio: np.ndarray) -> AsrResult:
        return AsrResult(self.text, -0.2, self.last_word_prob)


async def test_the_live_path_judges_whispers_confidence_in_the_last_word(llm) -> None:
    """The probability travels from the recognizer through ``asr.end`` to the policy: the
    same question waits the default when Whisper was unsure of its last word."""
    fake, client = llm
    waits, recorded = [], []
    audio = voice(160, 110)  # a falling voice: the pitch does not hold it
    for prob in (0.13, 0.97):
        runner = await make_runner(fake, client, max_sentences=1)
        runner.asr = UnsureOfTheLastWord("What should I cook for dinner if I only harm?", prob)
        heard: list[object] = []
        runner.listeners.append(lambda e, heard=heard: heard.append(e.data["last_word_prob"])
                                if e.name == "asr.end" else None)
        seg = RecordingSegmenter()
        live = LiveTurnTaker(runner, seg, on_turn=lambda turn: None)
        live.on_segment(SpeechPause(audio, 0, audio.size, audio.size / 16, audio.size + 3200))
        await until(lambda seg=seg: bool(seg.ends))
        waits.append(seg.ends[0])
        recorded.append(heard)
        live.on_segment(SpeechResumed(audio.size + 3200, 300.0))
        await live.close()
    assert waits == [live.policy.default_ms, live.policy.complete_ms]
    assert recorded == [[0.13], [0.97]]

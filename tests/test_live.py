"""Live turn-taking with a fake llama-server (real HTTP), fake ASR/TTS and the real-time sink.

The segmenter events are made by hand here (the segmenter itself is tested on real audio in
test_mic.py), so each path - confirmed, cancelled, not speculating - is driven exactly.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
from fake_llm import FakeLlm, Reply
from test_turn import SENTENCES, FakeAsr, FakeTts, make_runner, tokens

from pipeline.endpoint import EndpointPolicy
from pipeline.live import LiveTurn, LiveTurnTaker
from pipeline.llm_client import LlmClient
from pipeline.mic import SpeechGap, SpeechPause, SpeechResumed, UtteranceEnd
from pipeline.pauses import PauseHabit

COMPLETE = EndpointPolicy.complete_ms  # the wait after a whole question or sentence

RATE = 16000


class RecordingSegmenter:
    silence_ms = 0.0

    def __init__(self) -> None:
        self.ends: list[float | None] = []
        self.held: list[bool] = []
        self.holds = 0
        self.released = 0
        self.ended_now = 0

    def end_after(self, silence_ms: float | None, *, held: bool = False) -> None:
        if silence_ms is None and held:  # the hold at the pause, before any judgement
            self.holds += 1
            return
        self.ends.append(silence_ms)
        self.held.append(held)

    def release_end(self) -> None:
        self.released += 1

    def end_now(self) -> UtteranceEnd | None:
        self.ended_now += 1
        return None


def taker(runner: object, **kw: object) -> tuple[RecordingSegmenter, list[LiveTurn],
                                                  LiveTurnTaker]:
    """A LiveTurnTaker on ``runner`` with a recording segmenter and a list of its turns."""
    seg, turns = RecordingSegmenter(), []
    live = LiveTurnTaker(runner, seg, on_turn=turns.append, **kw)  # type: ignore[arg-type]
    return seg, turns, live


def pause(seconds: float) -> SpeechPause:
    n = int(seconds * RATE)
    return SpeechPause(np.zeros(n, dtype=np.float32), 0, n, seconds * 1000, n + RATE // 5)


def gap(seconds: float) -> SpeechGap:
    n = int(seconds * RATE)
    return SpeechGap(np.zeros(n, dtype=np.float32), 0, n, seconds * 1000, n + RATE // 10)


class CountingAsr(FakeAsr):
    """Counts its calls; each takes ``delay_s`` in its worker thread, like Whisper."""

    def __init__(self, text: str, delay_s: float = 0.15) -> None:
        super().__init__(text)
        self.delay_s, self.calls, self.finished = delay_s, 0, 0

    def transcribe(self, audio: np.ndarray) -> str:
        self.calls += 1
        time.sleep(self.delay_s)
        self.finished += 1
        return self.text


class DelayedTts(FakeTts):
    """FakeTts that takes ``delay_s`` per sentence in its worker thread, like Piper."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def synthesize(self, text: str) -> np.ndarray:
        time.sleep(self.delay_s)
        return super().synthesize(text)


def end(seconds: float, silence_ms: int = 250) -> UtteranceEnd:
    n = int(seconds * RATE)
    return UtteranceEnd(np.zeros(n, dtype=np.float32), 0, n, seconds * 1000,
                        n + silence_ms * RATE // 1000)


@pytest.fixture
async def llm():
    async with FakeLlm(Reply(tokens=tokens(*SENTENCES), token_delay=0.01)) as fake:
        async with LlmClient(fake.url) as client:
            yield fake, client


async def until(predicate, limit_s: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + limit_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_confirmed_speculation_plays_and_sets_the_endpoint(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("Why is the sky blue?")
    seg, turns = RecordingSegmenter(), []
    live = LiveTurnTaker(runner, seg, on_turn=turns.append)
    live.on_segment(pause(1.0))
    await until(lambda: seg.ends)  # the speculative transcript was judged...
    assert seg.ends == [live.policy.complete_ms]  # ...complete: the short wait
    live.on_utterance(end(1.0))
    await until(lambda: turns)
    turn: LiveTurn = turns[0]
    seen = [e.name for e in turn.result.events]
    assert turn.speculative and turn.result.error is None
    assert seen.index("speculation.endpoint") < seen.index("speculation.confirmed") \
        < seen.index("playback.start")
    # The endpoint decision (with its pitch cue) never holds up the LLM request.
    assert seen.index("asr.end") < seen.index("llm.request") < seen.index("speculation.endpoint")
    assert turn.endpoint_ms == 250 and turn.speech_end_ms == 200
    assert live.stats.to_dict()["started"] == 1 and live.stats.confirmed == 1
    assert len(runner.conversation.history) == 2
    await live.close()


async def test_speech_resuming_cancels_then_the_longer_utterance_speculates_again(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("Tell me about the")
    seg, turns = RecordingSegmenter(), []
    live = LiveTurnTaker(runner, seg, on_turn=turns.append)
    requested = asyncio.Event()
    runner.listeners.append(lambda e: requested.set() if e.name == "llm.first_token" else None)

    live.on_segment(pause(1.0))
    await asyncio.wait_for(requested.wait(), 5)
    # The judgement follows the request (it waits for the pitch, in a thread): under load
    # the fake server's first token can come first.
    await until(lambda: seg.ends)
    assert seg.ends == [1100]  # "the": an incomplete sentence waits long
    live.on_segment(SpeechResumed(RATE, 400.0))
    assert seg.ends[-1] is None  # the end goes back to the default

    runner.asr = FakeAsr("Tell me about the history of bicycles.")
    live.on_segment(pause(2.5))
    live.on_utterance(end(2.5))
    await until(lambda: turns)
    await live.close()
    stats = live.stats
    assert (stats.started, stats.cancelled, stats.confirmed) == (2, 1, 1)
    assert stats.cancelled_idle_confirmed == 1  # the dropped request's slot was seen idle
    assert len(turns) == 1 and turns[0].result.transcript.endswith("bicycles.")
    history = runner.conversation.history
    assert len(history) == 2 and history[0]["content"].endswith("bicycles.")
    assert len(fake.requests) == 2


@pytest.mark.parametrize("learn", [True, False])
async def test_going_on_after_a_finished_looking_pause_lengthens_the_next_wait(llm, learn) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("Call my sister.")
    seg, turns, live = taker(runner, pauses=PauseHabit(margin_ms=150) if learn else None)
    live.on_segment(pause(1.0))
    await until(lambda: seg.ends)
    assert seg.ends == [COMPLETE]  # a whole request: the short wait...
    live.on_segment(SpeechResumed(RATE, 700.0))  # ...but the user went on after 700 ms

    runner.asr = FakeAsr("Call my sister after lunch.")
    live.on_segment(pause(2.5))
    await until(lambda: len(seg.ends) == 3)
    assert seg.ends[-1] == (850 if learn else COMPLETE)  # that pause and a margin, this time
    live.on_utterance(end(2.5))
    await until(lambda: turns)
    await live.close()
    ev = next(e for e in turns[0].result.events if e.name == "speculation.endpoint")
    assert ev.data["complete_ms"] == seg.ends[-1] and ev.data["learned"] is learn


async def test_without_speculation_a_turn_starts_at_the_end(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    seg, turns = RecordingSegmenter(), []
    live = LiveTurnTaker(runner, seg, on_turn=turns.append, speculate=False)
    live.on_segment(pause(1.0))
    await asyncio.sleep(0.1)
    assert fake.requests == [] and seg.ends == []
    live.on_utterance(end(1.0, silence_ms=600))
    await until(lambda: turns)
    assert not turns[0].speculative and turns[0].endpoint_ms == 600
    assert live.stats.started == 0
    await live.close()


async def test_a_speculation_that_heard_nothing_leaves_the_end_to_an_ordinary_turn(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("")  # the gate heard no speech in the words so far
    seg, turns = RecordingSegmenter(), []
    live = LiveTurnTaker(runner, seg, on_turn=turns.append)
    live.on_segment(pause(1.0))
    await until(lambda: live.stats.cancelled == 1)
    runner.asr = FakeAsr("How do I sleep better?")
    live.on_utterance(end(1.5))
    await until(lambda: turns)
    assert not turns[0].speculative and turns[0].result.error is None
    await live.close()


async def test_an_unsure_speculative_transcript_waits_the_default(llm) -> None:
    from dataclasses import dataclass

    @dataclass
    class Heard:
        text: str
        avg_logprob: float
        last_word_prob: float | None = None
        redone: str = ""

    class UnsureAsr(FakeAsr):
        def recognize(self, audio: np.ndarray) -> Heard:
            return Heard("My thigh team mat.", -0.9)  # looks finished, Whisper was unsure

    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = UnsureAsr()
    seg = RecordingSegmenter()
    live = LiveTurnTaker(runner, seg, on_turn=lambda turn: None)
    live.on_segment(pause(1.0))
    await until(lambda: seg.ends)
    assert seg.ends == [live.policy.default_ms]
    live.on_segment(SpeechResumed(RATE, 500.0))
    await live.close()


async def test_whisper_started_at_the_gap_is_taken_by_the_pause_turn(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = asr = CountingAsr("Why is the sky blue?")
    seg, turns, live = taker(runner)
    live.on_segment(gap(1.0))
    await asyncio.sleep(0.1)  # the pause comes ~100 ms after the gap
    live.on_segment(pause(1.0))
    live.on_utterance(end(1.0))
    await until(lambda: turns)
    await live.close()
    result = turns[0].result
    assert asr.calls == 1  # Whisper ran once, from the gap, not again at the pause
    assert result.transcript == "Why is the sky blue?" and result.error is None
    start = next(e for e in result.events if e.name == "asr.start")
    assert start.data["early_ms"] >= 90  # it had been running since before t = 0
    stats = live.stats.to_dict()
    assert (stats["early_asr_started"], stats["early_asr_used"]) == (1, 1)


async def test_voice_after_the_gap_makes_the_pause_transcribe_anew(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = asr = CountingAsr("Why is the sky", delay_s=0.05)
    seg, turns, live = taker(runner)
    live.on_segment(gap(1.0))
    await until(lambda: asr.calls == 1)
    await asyncio.sleep(0.1)
    asr.text = "Why is the sky blue?"
    live.on_segment(pause(1.5))  # more words came between: a later last voiced sample
    live.on_utterance(end(1.5))
    await until(lambda: turns)
    await live.close()
    result = turns[0].result
    assert asr.calls == 2 and result.transcript == "Why is the sky blue?"
    assert not any("early_ms" in e.data for e in result.events if e.name == "asr.start")
    stats = live.stats.to_dict()
    assert (stats["early_asr_started"], stats["early_asr_used"]) == (1, 0)


async def test_no_early_whisper_while_a_turn_runs(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = asr = CountingAsr("Why is the sky blue?", delay_s=0.01)
    seg, turns, live = taker(runner)
    live.on_utterance(end(1.0, silence_ms=600))  # an ordinary turn, running
    await until(lambda: runner.busy)
    live.on_segment(gap(0.5))  # the user talks over it: not a moment to transcribe
    await until(lambda: turns)
    await live.close()
    assert live.stats.early_asr_started == 0 and asr.calls == 1


async def test_the_end_is_held_until_the_reply_is_ready_then_confirmed_at_once(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("Why is the sky blue?")
    seg, turns, live = taker(runner)
    runner.tts = DelayedTts(0.3)  # the first sentence takes a while to synthesize
    live.on_segment(pause(1.0))
    await until(lambda: seg.ends)
    assert seg.holds == 1  # from the pause on...
    assert seg.ends == [live.policy.complete_ms] and seg.held == [True]  # ...and once judged
    seg.silence_ms = 900.0  # by the time the audio is ready, the user has been quiet long
    await until(lambda: turns)
    await live.close()
    assert seg.released == 1 and seg.ended_now == 1
    turn = turns[0]
    names = [e.name for e in turn.result.events]
    assert turn.speculative and turn.endpoint_ms == 900
    assert names.index("tts.end") < names.index("speculation.confirmed") \
        < names.index("playback.start")


async def test_a_reply_ready_before_the_wait_leaves_the_end_to_the_segmenter(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("Why is the sky blue?")
    seg, turns = RecordingSegmenter(), []
    runner.tts = DelayedTts(0.1)
    live = LiveTurnTaker(runner, seg, on_turn=turns.append)
    live.on_segment(pause(1.0))
    await until(lambda: seg.released)  # the first sentence is ready
    assert seg.ended_now == 0  # 0 ms of silence so far: not the end yet
    live.on_utterance(end(1.0))  # the segmenter ends it after the judged wait
    await until(lambda: turns)
    await live.close()
    assert turns[0].speculative and live.stats.confirmed == 1


async def test_an_abandoned_speculation_does_not_wait_for_its_whisper(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = asr = CountingAsr("Tell me about the", delay_s=1.0)
    seg, turns, live = taker(runner)
    live.on_segment(pause(1.0))
    await until(lambda: asr.calls == 1)
    live.on_segment(SpeechResumed(RATE, 300.0))
    await until(lambda: not runner.busy)
    assert asr.finished == 0  # the turn is over while Whisper's thread still runs
    assert fake.requests == [] and live.stats.cancelled == 1
    await live.close()


async def test_a_speculation_confirmed_while_queued_records_it_in_its_own_turn(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("Tell me about the")
    seg, turns = RecordingSegmenter(), []
    events: list[object] = []
    runner.listeners.append(events.append)
    live = LiveTurnTaker(runner, seg, on_turn=turns.append)
    requested = asyncio.Event()
    runner.listeners.append(lambda e: requested.set() if e.name == "llm.first_token" else None)
    live.on_segment(pause(1.0))
    await asyncio.wait_for(requested.wait(), 5)
    live.on_segment(SpeechResumed(RATE, 300.0))  # hung up; its slot is checked next
    runner.asr = FakeAsr("Tell me about the history of bicycles.")
    live.on_segment(pause(2.5))  # queued behind the hang-up...
    live.on_utterance(end(2.5))  # ...and confirmed, perhaps before it started
    await until(lambda: turns)
    await live.close()
    confirmed = [e.turn for e in events if e.name == "speculation.confirmed"]
    cancelled = [e.turn for e in events if e.name == "speculation.cancelled"]
    assert confirmed == [turns[0].result.events[0].turn] and cancelled != confirmed
    assert any(e.name == "speculation.confirmed" for e in turns[0].result.events)


def test_speculation_stats_of_several_conversations_add_up() -> None:
    from pipeline.live import SpeculationStats

    a = SpeculationStats(started=2, confirmed=1, cancelled=1, saved_ms=[300.0],
                         early_asr_started=3, early_asr_used=1)
    b = SpeculationStats(started=1, confirmed=1, saved_ms=[500.0, 100.0], wasted_tokens=4)
    total = SpeculationStats.total([a, b])
    assert (total.started, total.confirmed, total.cancelled, total.wasted_tokens) == (3, 2, 1, 4)
    assert (total.early_asr_started, total.early_asr_used) == (3, 1)
    assert total.saved_ms == [300.0, 500.0, 100.0] and a.saved_ms == [300.0]


async def test_a_turn_queued_behind_the_last_is_pending(llm) -> None:
    """An utterance that ended while the last turn ran (too short to cut it) is queued:
    ``pending`` says one more turn is coming, so ``replay --live`` waits for it instead of
    closing it with the conversation."""
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = CountingAsr("Why is the sky blue?", delay_s=0.3)
    seg, turns, live = taker(runner, speculate=False)
    assert not live.pending
    live.on_utterance(end(1.0))
    live.on_utterance(end(0.5))  # a second one, queued behind the first
    await until(lambda: turns)
    assert live.pending
    await until(lambda: len(turns) == 2)
    await until(lambda: not live.pending)
    await live.close()


async def test_cancelling_a_speculation_queued_behind_a_confirmed_turn_leaves_that_turn(
        llm) -> None:
    """A speculation may start while the last one only finishes its hang-up, so one can be
    queued behind a confirmed turn. When the user goes on speaking, only it is dropped: the
    confirmed turn (running, not playing yet) is not, and it is answered."""
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("Tell me about the")
    seg, turns, live = taker(runner)
    requested = asyncio.Event()
    runner.listeners.append(lambda e: requested.set() if e.name == "llm.first_token" else None)
    live.on_segment(pause(1.0))
    await asyncio.wait_for(requested.wait(), 5)
    live.on_segment(SpeechResumed(RATE, 300.0))  # A hangs up; its slot is checked next
    runner.asr = CountingAsr("Tell me about the history of bicycles.", delay_s=0.5)
    live.on_segment(pause(2.5))  # B, queued behind A's hang-up...
    live.on_utterance(end(2.5))  # ...and confirmed
    live.on_segment(pause(3.0))  # C: the next utterance paused while A still hangs up
    assert live.stats.started == 3
    await until(lambda: runner.busy and not runner.abandoning)  # B runs, C waits
    live.on_segment(SpeechResumed(RATE, 300.0))  # the user went on: C is dropped
    await until(lambda: turns)
    await until(lambda: not live.pending)
    await live.close()
    assert [t.result.transcript for t in turns] == ["Tell me about the history of bicycles."]
    assert turns[0].result.error is None and not turns[0].result.abandoned
    assert live.stats.cancelled == 2 and live.stats.confirmed == 1


async def test_speech_over_the_reply_that_did_not_barge_in_drops_its_speculation(llm) -> None:
    """A backchannel that began over the reply paused (a speculation started) and ended
    without cutting in: not a turn. Its speculation is dropped, not left waiting for a
    confirmation that never comes, and the next utterance is answered."""
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    runner.asr = FakeAsr("Okay, sure.")
    seg, turns, live = taker(runner)
    live.on_segment(pause(0.6))
    await until(lambda: runner.busy)
    live.on_utterance(end(0.6), during_playback=True)
    await until(lambda: not runner.busy and not live.pending)
    assert turns == [] and live.stats.cancelled == 1 and live.stats.confirmed == 0
    runner.asr = FakeAsr("Why is the sky blue?")
    live.on_utterance(end(1.5))
    await until(lambda: turns)
    await live.close()
    assert [t.result.transcript for t in turns] == ["Why is the sky blue?"]

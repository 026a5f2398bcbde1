"""The turn runner with a fake llama-server (real HTTP), fake ASR/TTS and the real-time sink.

These assert behaviour and ordering; the real-model runs are in test_turn_integration.py.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from fake_llm import FakeLlm, Reply

from pipeline import turn as turn_module
from pipeline.audio_out import RealtimeNullSink
from pipeline.conversation import Conversation
from pipeline.early_asr import AsrResult
from pipeline.heard import INTERRUPTED_MARK
from pipeline.llm_client import LlmClient
from pipeline.tts import ONSET_MARGIN_MS
from pipeline.turn import TurnConfig, TurnRunner

RATE = 16000
SENTENCES = ["Sleep at the same time every day.", " Keep your bedroom cool and dark.",
             " Avoid screens an hour before bed.", " A warm bath can help too."]


def tokens(*sentences: str) -> list[str]:
    out: list[str] = []
    for s in sentences:
        words = s.split(" ")
        out += [(" " if i or s.startswith(" ") else "") + w for i, w in enumerate(words) if w]
    return out


class FakeAsr:
    def __init__(self, text: str = "How do I sleep better?") -> None:
        self.text = text

    def transcribe(self, audio: np.ndarray) -> str:
        return self.text


class FakeTts:
    """2 ms of audio per character, produced instantly (or failing on demand)."""

    sample_rate = RATE

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.spoken: list[str] = []

    def synthesize(self, text: str) -> np.ndarray:
        if self.fail_on and self.fail_on in text:
            raise RuntimeError("voice model crashed")
        self.spoken.append(text)
        return np.ones(len(text) * RATE // 500, dtype=np.int16)

    def abort(self, thread_id: int | None = None) -> None:
        """Instant synthesis: nothing is ever running to abort."""


class SlowVoice(FakeTts):
    """20 ms of audio per character: room to barge in mid-sentence."""

    def synthesize(self, text: str) -> np.ndarray:
        return np.repeat(super().synthesize(text), 10)


AUDIO = np.zeros(RATE, dtype=np.float32)


async def make_runner(fake: FakeLlm, client: LlmClient, mode: str = "streamed",
                      tts: FakeTts | None = None, **cfg: object) -> TurnRunner:
    sink = RealtimeNullSink()
    await sink.open(RATE)
    config = TurnConfig(mode=mode, **cfg)  # type: ignore[arg-type]
    return TurnRunner(FakeAsr(), client, tts or FakeTts(), sink, Conversation(), config)


def names(result: object) -> list[str]:
    return [e.name for e in result.events]  # type: ignore[attr-defined]


def t_of(result: object, name: str) -> float:
    return next(e.t for e in result.events if e.name == name)  # type: ignore[attr-defined]


@pytest.fixture
async def slow_fake():
    async with FakeLlm(Reply(tokens=tokens(*SENTENCES), token_delay=0.02)) as fake:
        async with LlmClient(fake.url) as client:
            yield fake, client


async def test_streamed_speaks_before_the_llm_finishes(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, max_sentences=None)
    result = await runner.run(AUDIO)
    assert result.error is None
    assert t_of(result, "playback.start") < t_of(result, "llm.end")
    assert result.metrics.reply_sentences == 4
    assert result.metrics.first_audio_ms < result.metrics.turn_ms


class LeadingSilenceTts(FakeTts):
    """Each sentence as Piper makes it: 40 ms of digital silence, then 100 ms of sound."""

    def synthesize(self, text: str) -> np.ndarray:
        self.spoken.append(text)
        return np.concatenate([np.zeros(RATE // 25, np.int16), np.full(RATE // 10, 3000,
                                                                         np.int16)])


async def test_only_the_first_sentence_loses_its_leading_silence(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, tts=LeadingSilenceTts(), max_sentences=2)
    result = await runner.run(AUDIO)
    assert result.error is None
    audio_s = [e.data["audio_s"] for e in result.events if e.name == "tts.end"]
    margin_s = int(ONSET_MARGIN_MS * RATE / 1000) / RATE
    # The first: sound after the margin only; the second keeps its pause before it.
    assert audio_s == [round(0.1 + margin_s, 3), 0.14]


async def test_serial_plays_only_after_the_whole_reply_and_all_tts(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, mode="serial", max_sentences=None)
    result = await runner.run(AUDIO)
    assert result.error is None
    last_tts = max(e.t for e in result.events if e.name == "tts.end")
    assert t_of(result, "playback.start") >= max(t_of(result, "llm.end"), last_tts)
    assert result.metrics.mode == "serial"


async def test_events_arrive_in_pipeline_order(slow_fake) -> None:
    fake, client = slow_fake
    result = await (await make_runner(fake, client)).run(AUDIO)
    order = ["turn.start", "asr.start", "asr.end", "llm.request", "llm.first_chunk",
             "llm.first_token", "splitter.sentence", "tts.start", "tts.end", "playback.start",
             "playback.end", "turn.end"]
    seen = names(result)
    assert [seen.index(n) for n in order] == sorted(seen.index(n) for n in order)
    ts = [e.t for e in result.events]
    assert ts == sorted(ts) or all(b >= a - 0.005 for a, b in zip(ts, ts[1:], strict=False))


async def test_history_keeps_raw_reply_and_next_prompt_extends_it(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, max_sentences=None)
    first = await runner.run(AUDIO)
    await runner.run(AUDIO)
    sent = fake.requests[-1].body["messages"]
    assert sent[0]["role"] == "system"
    assert sent[1:3] == [{"role": "user", "content": "How do I sleep better?"},
                         {"role": "assistant", "content": "".join(tokens(*SENTENCES))}]
    assert first.reply == "".join(tokens(*SENTENCES))
    assert fake.requests[0].body["messages"] == sent[:1] + sent[-1:]  # prefix-stable


async def test_prime_sends_what_the_first_prompt_starts_with_and_keeps_no_history(
        slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, id_slot=0)
    assert await runner.prime() is True
    primed = fake.requests[-1].body
    assert primed["max_tokens"] == 1 and primed["cache_prompt"] is True
    assert primed["id_slot"] == 0
    assert runner.conversation.history == [] and runner.turns == 0
    await runner.run(AUDIO)
    first = fake.requests[-1].body["messages"]
    assert primed["messages"][:-1] == first[:-1]  # the system prompt, as the turn sends it


async def test_prime_against_no_server_is_false_not_an_error() -> None:
    async with LlmClient("http://127.0.0.1:9", connect_timeout=1) as client:
        sink = RealtimeNullSink()
        await sink.open(RATE)
        runner = TurnRunner(FakeAsr(), client, FakeTts(), sink, Conversation(), TurnConfig())
        assert await runner.prime() is False


async def requests_seen(fake: FakeLlm, n: int, limit_s: float = 5.0) -> None:
    for _ in range(int(limit_s / 0.01)):
        if len(fake.requests) >= n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{len(fake.requests)} requests, not {n}, after {limit_s} s")


def primes(fake: FakeLlm) -> list[dict[str, object]]:
    return [r.body for r in fake.requests if r.body.get("max_tokens") == 1]


async def test_prime_next_prefills_the_kept_history_and_the_next_turn_reports_it(
        slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, id_slot=1, prime_next=True, max_sentences=2)
    first = await runner.run(AUDIO)
    assert first.committed
    second = await runner.run(AUDIO)
    await runner.primed()  # the one after the second turn, sent in the background
    prime = primes(fake)
    assert len(prime) == 2  # one after each kept turn
    turn2 = fake.requests[2].body
    assert fake.requests[1].body is prime[0] and turn2["max_tokens"] != 1
    # The prime is what the next request starts with: the history with the reply as kept.
    assert prime[0]["messages"][:-1] == turn2["messages"][:-1]
    assert prime[0]["messages"][-1] == {"role": "user", "content": ""}
    assert prime[0]["id_slot"] == 1  # the conversation's own slot
    request = next(e for e in second.events if e.name == "llm.request")
    assert request.data["primed"]["ok"] is True
    assert request.data["primed"]["prompt_n"] is not None
    assert "primed" not in next(e for e in first.events if e.name == "llm.request").data


async def test_without_prime_next_a_turn_sends_only_its_own_request(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, max_sentences=2)
    await runner.run(AUDIO)
    await runner.run(AUDIO)
    assert len(fake.requests) == 2 and primes(fake) == []


async def test_a_turn_that_kept_nothing_primes_nothing() -> None:
    failing = Reply(tokens=["Sleep"], error_after=0)  # the stream fails before a word
    async with FakeLlm(failing) as fake, LlmClient(fake.url) as client:
        runner = await make_runner(fake, client, prime_next=True)
        result = await runner.run(AUDIO)
        assert result.error is not None and not result.committed
        await asyncio.sleep(0.05)
        assert len(fake.requests) == 1 and primes(fake) == []


async def test_a_stalled_prime_delays_the_next_turn_by_at_most_its_wait(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turn_module, "PRIME_WAIT_S", 0.3)
    replies = [Reply(tokens=tokens(SENTENCES[0])), Reply(stall_after=0),
               Reply(tokens=tokens(SENTENCES[1]))]
    async with FakeLlm(replies) as fake, LlmClient(fake.url) as client:
        runner = await make_runner(fake, client, prime_next=True)
        await runner.run(AUDIO)
        await requests_seen(fake, 2)  # the turn's and the prime's, which never answers
        started = asyncio.get_running_loop().time()
        second = await runner.run(AUDIO)
        assert asyncio.get_running_loop().time() - started < 5  # not stuck behind it
        assert second.error is None and second.reply == SENTENCES[1]
        primed = next(e for e in second.events if e.name == "llm.request").data["primed"]
        assert primed["ok"] is False and primed["wait_ms"] >= 250


async def test_a_conversation_that_ends_hangs_up_on_its_prime() -> None:
    replies = [Reply(tokens=tokens(SENTENCES[0])), Reply(stall_after=0)]
    async with FakeLlm(replies) as fake, LlmClient(fake.url) as client:
        runner = await make_runner(fake, client, prime_next=True)
        await runner.run(AUDIO)
        await requests_seen(fake, 2)  # the turn's and the prime's, which never answers
        await asyncio.wait_for(runner.drop_prime(), 2)
        await fake.wait_disconnect()  # the server sees the connection go
        await runner.primed()  # nothing left to wait for


async def test_max_sentences_hangs_up_and_keeps_only_spoken_sentences(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, max_sentences=2)
    result = await runner.run(AUDIO)
    record = await fake.wait_disconnect()
    assert record.tokens_sent < len(tokens(*SENTENCES))
    assert result.metrics.reply_sentences == 2
    assert result.reply == "".join(tokens(*SENTENCES[:2]))
    end = next(e for e in result.events if e.name == "llm.end")
    assert end.data["finish_reason"] == "max_sentences"


async def test_llm_error_mid_stream_ends_turn_and_history_survives() -> None:
    replies = [Reply(tokens=tokens(*SENTENCES)), Reply(tokens=tokens(*SENTENCES), error_after=3),
               Reply(tokens=tokens(*SENTENCES))]
    async with FakeLlm(replies) as fake, LlmClient(fake.url) as client:
        runner = await make_runner(fake, client, max_sentences=None)
        await runner.run(AUDIO)
        history = list(runner.conversation.history)
        bad = await asyncio.wait_for(runner.run(AUDIO), 10)
        assert bad.error and "error" in bad.error and "\n" not in bad.error
        assert "turn.error" in names(bad) and names(bad)[-1] == "turn.end"
        assert runner.conversation.history == history
        good = await runner.run(AUDIO)
        assert good.error is None and len(runner.conversation.history) == 4


async def test_unreachable_server_is_one_clear_line() -> None:
    async with LlmClient("http://127.0.0.1:9", connect_timeout=1) as client:
        sink = RealtimeNullSink()
        await sink.open(RATE)
        runner = TurnRunner(FakeAsr(), client, FakeTts(), sink)
        result = await asyncio.wait_for(runner.run(AUDIO), 10)
        assert result.error and "voice-llm up" in result.error
        assert runner.conversation.history == []


async def test_tts_failure_skips_that_sentence_reports_it_and_speaks_the_rest(
        slow_fake) -> None:
    fake, client = slow_fake
    tts = FakeTts(fail_on="bedroom")
    runner = await make_runner(fake, client, tts=tts, max_sentences=None)
    result = await asyncio.wait_for(runner.run(AUDIO), 10)
    assert result.error is None
    errors = [e for e in result.events if e.name == "tts.error"]
    assert [e.data["index"] for e in errors] == [1]
    assert "voice model crashed" in errors[0].data["message"]
    assert [s.strip() for s in tts.spoken] == [s.strip() for s in SENTENCES if
                                               "bedroom" not in s]
    assert any(e.name == "playback.end" for e in result.events)
    # The skipped sentence stays in the history token for token (the KV prefix).
    assert runner.conversation.history[-1]["content"] == "".join(SENTENCES)
    await fake.wait_idle()
    tts.fail_on = None
    good = await runner.run(AUDIO)
    assert good.error is None and not any(e.name == "tts.error" for e in good.events)


async def test_no_speech_is_a_turn_error_not_a_crash(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client)
    runner.asr = FakeAsr("")
    result = await runner.run(AUDIO)
    assert result.error and "no speech" in result.error
    assert fake.requests == []


async def test_asr_end_says_when_whisper_looped_and_was_redone(slow_fake) -> None:
    """A looped decode redone (``pipeline.asr``: more silence, or the 30 s window) is
    named in ``asr.end``; a first decode that held names nothing."""

    class Redone(FakeAsr):
        def __init__(self, redone: str) -> None:
            super().__init__("Why is the sky blue?")
            self.redone = redone

        def recognize(self, audio: np.ndarray) -> AsrResult:
            return AsrResult(self.text, -0.2, 0.9, redone=self.redone)

    fake, client = slow_fake
    runner = await make_runner(fake, client)
    ends = []
    for redone in ("fitted", ""):
        runner.asr = Redone(redone)
        result = await runner.run(AUDIO)
        ends += [e.data for e in result.events if e.name == "asr.end"]
    assert ends[0]["redone"] == "fitted" and "redone" not in ends[1]
    assert ends[0]["text"] == "Why is the sky blue?"


async def test_interrupt_silences_hangs_up_and_keeps_what_was_heard(slow_fake) -> None:
    fake, client = slow_fake
    fake.reply = Reply(tokens=tokens(*SENTENCES), token_delay=0.08)  # still running at 0.4 s
    runner = await make_runner(fake, client, tts=SlowVoice(), max_sentences=None)
    speaking = asyncio.Event()
    runner.listeners.append(lambda e: speaking.set() if e.name == "playback.start" else None)

    async def barge_in() -> None:
        await speaking.wait()
        assert runner.speaking
        # 0.40 of the first sentence's 0.66 s: "Sleep at the same", the fourth word heard
        # from 0.36 s on (fewer are not kept)
        await asyncio.sleep(0.4)
        assert runner.interrupt("test")

    task = asyncio.create_task(barge_in())
    result = await asyncio.wait_for(runner.run(AUDIO), 10)
    await task
    seen = names(result)
    for name in ("bargein.detected", "playback.stopped", "llm.closed", "server.slot_idle"):
        assert name in seen, name
    assert seen.index("bargein.detected") < seen.index("playback.stopped")
    assert result.interrupted and result.metrics.interrupted is True
    assert (await fake.wait_disconnect()).outcome == "client_gone"
    kept = runner.conversation.history[-1]["content"]
    assert kept.endswith(INTERRUPTED_MARK)
    assert result.reply.startswith(kept.removesuffix(INTERRUPTED_MARK))
    assert len(kept) < len(SENTENCES[0]) + len(INTERRUPTED_MARK)
    assert not runner.interrupt("late")  # nothing running any more


# --- speculative turns (live turn-taking) --------------------------------------------------


async def test_speculative_turn_plays_only_once_confirmed(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, max_sentences=2)
    confirmed = asyncio.Event()
    first_audio = asyncio.Event()
    runner.listeners.append(lambda e: first_audio.set() if e.name == "tts.end" else None)
    task = asyncio.create_task(runner.run(AUDIO, confirmed=confirmed))
    await asyncio.wait_for(first_audio.wait(), 5)
    await asyncio.sleep(0.1)  # audio is ready: still nothing may be played
    assert not runner.speaking
    confirmed.set()
    result = await asyncio.wait_for(task, 10)
    assert result.error is None and not result.abandoned
    assert t_of(result, "playback.start") > t_of(result, "tts.end")
    assert runner.conversation.history[-1]["content"] == result.reply


async def test_abandoned_speculation_hangs_up_and_leaves_no_history(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, max_sentences=None)
    requested = asyncio.Event()
    runner.listeners.append(lambda e: requested.set() if e.name == "llm.first_token" else None)
    task = asyncio.create_task(runner.run(AUDIO, confirmed=asyncio.Event()))
    await asyncio.wait_for(requested.wait(), 5)
    assert runner.abandon("speech resumed")
    result = await asyncio.wait_for(task, 10)
    seen = names(result)
    assert result.abandoned and not result.interrupted and result.error is None
    assert "speculation.cancelled" in seen and "playback.start" not in seen
    assert "bargein.detected" not in seen  # not a barge-in: the user never heard it
    closed = next(e for e in result.events if e.name == "llm.closed")
    assert closed.data["reason"] == "speculation"
    idle = next(e for e in result.events if e.name == "server.slot_idle")
    assert idle.data["confirmed"] is True
    assert (await fake.wait_disconnect()).outcome == "client_gone"
    assert runner.conversation.history == []  # nothing entered the history
    assert not runner.abandon()  # nothing running any more


async def test_abandoned_during_asr_sends_no_request(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client)

    class SlowAsr(FakeAsr):
        def transcribe(self, audio: np.ndarray) -> str:
            import time
            time.sleep(0.2)
            return self.text

    runner.asr = SlowAsr()
    task = asyncio.create_task(runner.run(AUDIO, confirmed=asyncio.Event()))
    await asyncio.sleep(0.05)
    assert runner.abandon("speech resumed")
    result = await asyncio.wait_for(task, 10)
    assert result.abandoned and "llm.request" not in names(result)
    assert fake.requests == [] and runner.conversation.history == []


async def test_a_playing_turn_cannot_be_abandoned(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client, max_sentences=1)
    playing = asyncio.Event()
    runner.listeners.append(lambda e: playing.set() if e.name == "playback.start" else None)
    confirmed = asyncio.Event()
    confirmed.set()
    task = asyncio.create_task(runner.run(AUDIO, confirmed=confirmed))
    await asyncio.wait_for(playing.wait(), 5)
    assert not runner.abandon()
    result = await asyncio.wait_for(task, 10)
    assert not result.abandoned and result.error is None


async def test_the_reply_is_sampled_with_the_repetition_penalty(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client)
    await runner.run(text="first")
    body = fake.requests[-1].body
    assert body["repeat_penalty"] == TurnConfig.repeat_penalty
    assert body["repeat_last_n"] == TurnConfig.repeat_last_n
    off = await make_runner(fake, client, repeat_penalty=None)
    await off.run(text="second")
    assert "repeat_penalty" not in fake.requests[-1].body
    assert "repeat_last_n" not in fake.requests[-1].body


async def test_a_reply_cut_after_a_word_or_two_is_not_kept(slow_fake) -> None:
    fake, client = slow_fake
    fake.reply = Reply(tokens=tokens(*SENTENCES), token_delay=0.08)
    runner = await make_runner(fake, client, tts=SlowVoice(), max_sentences=None)
    await runner.run(text="first")
    history = list(runner.conversation.history)
    speaking = asyncio.Event()
    runner.listeners.append(lambda e: speaking.set() if e.name == "playback.start" else None)

    async def barge_in() -> None:
        await speaking.wait()
        await asyncio.sleep(0.15)  # "Sleep" of the first sentence (4 words take 0.36 s)
        assert runner.interrupt("test")

    task = asyncio.create_task(barge_in())
    result = await asyncio.wait_for(runner.run(text="second"), 10)
    await task
    assert result.interrupted and result.heard and not result.committed
    assert len(result.heard.split()) < 4
    assert runner.conversation.history == history  # no "Sleep…" for the model to copy


async def test_a_reply_cut_before_a_word_was_heard_is_not_kept(slow_fake) -> None:
    fake, client = slow_fake
    runner = await make_runner(fake, client)
    await runner.run(AUDIO)
    history = list(runner.conversation.history)
    runner.listeners.append(lambda e: runner.interrupt("user")
                            if e.name == "splitter.sentence" else None)
    result = await runner.run(AUDIO)  # interrupted before its first sample played
    assert result.interrupted and result.heard == "" and not result.committed
    assert runner.conversation.history == history  # no lone "…" for the model to copy


class SpeakableOnlyTts(FakeTts):
    """Like Piper: text with no letters or digits ("...") gives no audio."""

    def synthesize(self, text: str) -> np.ndarray:
        audio = super().synthesize(text)
        return audio if any(c.isalnum() for c in text) else audio[:0]


async def test_a_reply_with_nothing_to_say_aloud_is_asked_again_then_not_kept() -> None:
    replies = [Reply(tokens=tokens(*SENTENCES)), Reply(tokens=["..."]), Reply(tokens=["..."]),
               Reply(tokens=tokens(*SENTENCES)), Reply(tokens=["..."]),
               Reply(tokens=tokens(*SENTENCES))]
    async with FakeLlm(replies) as fake, LlmClient(fake.url) as client:
        runner = await make_runner(fake, client, tts=SpeakableOnlyTts())
        await runner.run(AUDIO)
        history = list(runner.conversation.history)
        silent = await runner.run(AUDIO)  # "..." twice: silent, nothing kept
        assert silent.error is None and silent.reply == "..." and not silent.committed
        assert runner.conversation.history == history  # no "..." for the model to copy
        retry = fake.requests[-1].body
        assert retry["temperature"] == 0.8 and "seed" not in retry  # fresh sampling
        assert fake.requests[-2].body["seed"] == 1234
        assert names(silent).count("llm.silent_retry") == 1
        await runner.run(AUDIO)
        assert len(runner.conversation.history) == 4
        saved = await runner.run(AUDIO)  # "..." then a real reply: that one is spoken
        assert saved.reply == "".join(tokens(*SENTENCES)) and saved.committed
        assert saved.metrics.first_audio_ms is not None


async def test_audio_spoken_over_the_reply_is_transcribed_both_ways_and_the_surer_kept(
        slow_fake) -> None:
    """With the microphone's own samples beside the echo-cancelled ones (the user spoke
    over the reply) and Whisper unsure of the cancelled audio, both are decoded and the
    transcript Whisper was surer of is the turn's; ``asr.end`` names which. Without them,
    or with Whisper sure, one decode."""

    class ByAudio(FakeAsr):
        def __init__(self) -> None:
            super().__init__()
            self.decoded = 0

        def recognize(self, audio: np.ndarray) -> AsrResult:
            self.decoded += 1
            if audio[0] > 0:  # the microphone's own samples in this test
                return AsrResult("How can I learn a new language quickly?", -0.2, 0.9)
            return AsrResult("I learned a through-angle quickly.", -0.9, 0.1)

    fake, client = slow_fake
    runner = await make_runner(fake, client)
    asr = ByAudio()
    runner.asr = asr
    cancelled, own = np.zeros(RATE, np.float32), np.full(RATE, 0.1, np.float32)
    result = await runner.run(cancelled, uncancelled=own)
    [end] = [e.data for e in result.events if e.name == "asr.end"]
    assert end["text"] == "How can I learn a new language quickly?"
    assert end["double_talk"] == "microphone" and asr.decoded == 2
    result = await runner.run(cancelled)
    [end] = [e.data for e in result.events if e.name == "asr.end"]
    assert "double_talk" not in end and asr.decoded == 3
    assert end["text"] == "I learned a through-angle quickly."
    # Whisper sure of the cancelled audio: one decode
    result = await runner.run(own, uncancelled=cancelled)
    [end] = [e.data for e in result.events if e.name == "asr.end"]
    assert end["double_talk"] == "sure" and asr.decoded == 4

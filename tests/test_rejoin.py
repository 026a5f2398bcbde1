"""After a false endpoint the words are not lost (pipeline/live.py, ``rejoin_s``).

A live turn cut by the user's voice before ``MIN_KEPT_WORDS`` of its reply were heard is
not kept, and its question would go with it: its words go before the next utterance's.
Fake llama-server (real HTTP), fake ASR/TTS, the real-time sink and hand-made segmenter
events, as in test_live.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from test_live import RATE, end, llm, pause, taker, until  # noqa: F401  (llm: a fixture)
from test_turn import FakeAsr, FakeTts, make_runner

from pipeline.events import Event, EventName
from pipeline.live import LiveTurn
from pipeline.mic import SpeechResumed, SpeechStart
from pipeline.pauses import PauseHabit
from pipeline.rejoin import join_transcripts
from pipeline.turn import TurnResult, TurnRunner


class HalfSecondVoice(FakeTts):
    """Half a second of audio per sentence: room to cut before or after a whole one."""

    def synthesize(self, text: str) -> np.ndarray:
        super().synthesize(text)
        return np.ones(RATE // 2, dtype=np.int16)


def barge_in_after(runner: TurnRunner, seconds: float) -> None:
    """The user's voice cuts the next reply ``seconds`` into its playback (once)."""
    def on_event(ev: Event) -> None:
        if ev.name == EventName.PLAYBACK_START:
            runner.listeners.remove(on_event)
            asyncio.get_running_loop().call_later(seconds, runner.interrupt, "mic")
    runner.listeners.append(on_event)


def sent_user(fake: Any) -> str:
    return str(fake.requests[-1].body["messages"][-1]["content"])


def asr_end(turn: LiveTurn) -> Event:
    return next(e for e in turn.result.events if e.name == EventName.ASR_END)


async def cut_turn(runner: TurnRunner, live: Any, turns: list[LiveTurn], text: str,
                   at_s: float = 0.0) -> LiveTurn:
    """An ordinary turn on ``text`` whose reply the user's voice cuts ``at_s`` in."""
    runner.asr = FakeAsr(text)
    barge_in_after(runner, at_s)
    count = len(turns)
    live.on_utterance(end(1.0))
    await until(lambda: len(turns) > count)
    return turns[-1]


async def answer_next(runner: TurnRunner, live: Any, turns: list[LiveTurn], text: str,
                      seconds: float = 0.8) -> TurnResult:
    """The next utterance (``seconds`` long, heard as ``text``): its turn's result once it
    is over, the conversation then closed."""
    runner.asr = FakeAsr(text)
    count = len(turns)
    live.on_utterance(end(seconds))
    await until(lambda: len(turns) > count)
    await live.close()
    return turns[-1].result


async def runner_for(fake: Any, client: Any) -> TurnRunner:
    return await make_runner(fake, client, max_sentences=2, tts=HalfSecondVoice())


def test_the_transcripts_join_with_their_punctuation() -> None:
    assert join_transcripts("Call my sister.", " After lunch.") == "Call my sister. After lunch."
    assert join_transcripts("Call my sister", "after lunch") == "Call my sister after lunch"
    # no full stop at the pause: the sentence goes on, without Whisper's capital
    assert join_transcripts("Call my sister", "After lunch.") == "Call my sister after lunch."
    assert join_transcripts("Can you tell me", "I think it's late") \
        == "Can you tell me I think it's late"
    assert join_transcripts("Put on the", "TV please") == "Put on the TV please"
    assert join_transcripts("Is it true?", "Really?") == "Is it true? Really?"
    assert join_transcripts("", "After lunch.") == "After lunch."


async def test_words_cut_unheard_go_before_the_next_utterance(llm) -> None:  # noqa: F811
    fake, client = llm
    runner = await runner_for(fake, client)
    seg, turns, live = taker(runner, speculate=False)
    first = await cut_turn(runner, live, turns, "Call my sister.")
    assert first.result.interrupted and not first.result.committed
    assert runner.conversation.history == []  # the pair is not kept...

    second = await answer_next(runner, live, turns, "After lunch.")
    # ...but its words are: the LLM is asked the whole request, the history keeps it.
    assert second.error is None and second.committed
    assert second.transcript == "Call my sister. After lunch."
    assert sent_user(fake) == "Call my sister. After lunch."
    history = runner.conversation.history
    assert len(history) == 2 and history[0] == {"role": "user",
                                                 "content": "Call my sister. After lunch."}
    ev = asr_end(turns[1])
    assert ev.data["text"] == "After lunch."  # the new words alone, as Whisper heard them
    assert ev.data["rejoined"] == {"text": "Call my sister.", "turn": first.result.turn}


async def test_a_speculative_turn_carries_them_and_cuts_chain(llm) -> None:  # noqa: F811
    fake, client = llm
    runner = await runner_for(fake, client)
    seg, turns, live = taker(runner)
    await cut_turn(runner, live, turns, "Call my sister.")
    # The next utterance is cut too (another pause taken for the end): both wait.
    second = await cut_turn(runner, live, turns, "After lunch.")
    assert second.result.transcript == "Call my sister. After lunch."
    assert not second.result.committed

    runner.asr = FakeAsr("Around two.")
    live.on_segment(pause(1.0))  # a speculation on the next: it carries the words too
    await until(lambda: seg.ends)
    live.on_utterance(end(1.0))
    await until(lambda: len(turns) == 3)
    await live.close()
    third = turns[2]
    assert third.speculative and third.result.committed
    assert sent_user(fake) == "Call my sister. After lunch. Around two."
    assert asr_end(third).data["rejoined"]["turn"] == second.result.turn
    assert runner.conversation.history[0]["content"] == "Call my sister. After lunch. Around two."


async def test_the_pause_before_carried_words_lengthens_the_wait(llm) -> None:  # noqa: F811
    fake, client = llm
    runner = await runner_for(fake, client)
    habit = PauseHabit(margin_ms=150)
    seg, turns, live = taker(runner, pauses=habit)
    await cut_turn(runner, live, turns, "Call my sister.")  # its voice ended at 1.0 s
    live.on_segment(SpeechStart(int(1.7 * RATE)))  # the rest of the request, 700 ms later
    runner.asr = FakeAsr("After lunch today.")
    live.on_segment(pause(1.0))  # its turn carries the cut words: that was a pause
    await until(lambda: seg.ends)
    assert habit.longest_ms == 700 and seg.ends[-1] == 850
    live.on_utterance(end(1.0))
    await until(lambda: len(turns) == 2)
    await live.close()
    assert sent_user(fake) == "Call my sister. After lunch today."


async def test_a_cut_reply_that_was_kept_passes_nothing_on(llm) -> None:  # noqa: F811
    fake, client = llm
    runner = await runner_for(fake, client)
    seg, turns, live = taker(runner, speculate=False)
    first = await cut_turn(runner, live, turns, "How do I sleep better?", at_s=0.7)
    assert first.result.interrupted and first.result.committed  # 7 words heard: kept

    await answer_next(runner, live, turns, "And in summer?")
    assert len(turns) == 2
    assert sent_user(fake) == "And in summer?"
    assert "rejoined" not in asr_end(turns[1]).data
    assert [m["content"] for m in runner.conversation.history[::2]] == [
        "How do I sleep better?", "And in summer?"]


async def test_an_utterance_after_the_bound_starts_afresh(llm) -> None:  # noqa: F811
    fake, client = llm
    runner = await runner_for(fake, client)
    seg, turns, live = taker(runner, speculate=False, rejoin_s=0.3)
    await cut_turn(runner, live, turns, "Call my sister.")
    await asyncio.sleep(0.8)
    runner.asr = FakeAsr("What time is it?")
    live.on_utterance(end(0.2, silence_ms=100))  # its voice began ~0.5 s after the cut
    await until(lambda: len(turns) == 2)
    # Timed out: the words are gone for good, not kept for a later utterance either.
    runner.asr = FakeAsr("And tomorrow?")
    live.on_utterance(end(0.2, silence_ms=100))
    await until(lambda: len(turns) == 3)
    await live.close()
    users = [m["content"] for m in runner.conversation.history[::2]]
    assert users == ["What time is it?", "And tomorrow?"]
    assert all("rejoined" not in asr_end(t).data for t in turns[1:])


async def test_an_abandoned_speculation_passes_nothing_on(llm) -> None:  # noqa: F811
    fake, client = llm
    runner = await runner_for(fake, client)
    seg, turns, live = taker(runner)
    runner.asr = FakeAsr("Call my sister")
    requested = asyncio.Event()
    runner.listeners.append(lambda e: requested.set() if e.name == "llm.request" else None)
    live.on_segment(pause(1.0))
    await asyncio.wait_for(requested.wait(), 5)
    live.on_segment(SpeechResumed(RATE, 400.0))  # the user went on: abandoned, unheard
    await until(lambda: live.stats.cancelled == 1 and not runner.busy)

    runner.asr = FakeAsr("Call my sister after lunch.")
    live.on_segment(pause(2.0))
    live.on_utterance(end(2.0))
    await until(lambda: turns)
    await live.close()
    assert len(turns) == 1 and "rejoined" not in asr_end(turns[0]).data
    assert sent_user(fake) == "Call my sister after lunch."
    assert runner.conversation.history[0]["content"] == "Call my sister after lunch."


async def test_the_conversation_ending_cuts_nothing_to_carry(llm) -> None:  # noqa: F811
    fake, client = llm
    runner = await runner_for(fake, client)
    seg, turns, live = taker(runner, speculate=False)
    runner.asr = FakeAsr("Call my sister.")
    live.on_utterance(end(1.0))
    await until(lambda: runner.speaking)
    await live.close()  # interrupts the turn as a barge-in would, but nobody spoke
    assert turns and turns[0].result.interrupted
    assert live.cuts.cut is None


async def test_words_cut_while_whisper_runs_are_kept_for_the_next(llm) -> None:  # noqa: F811
    """The user goes on while the turn is still in Whisper (a slow host): the cut waits for
    the words instead of dropping them, asks the LLM nothing, and the next utterance's
    turn is asked the whole request."""
    from test_live import CountingAsr

    fake, client = llm
    runner = await runner_for(fake, client)
    seg, turns, live = taker(runner, speculate=False)
    runner.asr = asr = CountingAsr("Call my sister.", delay_s=0.6)
    live.on_utterance(end(1.0))
    await until(lambda: asr.calls == 1)
    assert runner.interrupt("mic")  # the voice of the rest, mid-Whisper
    await until(lambda: turns)
    first = turns[0].result
    assert asr.finished == 1 and fake.requests == []
    assert first.interrupted and not first.abandoned and not first.committed
    assert first.transcript == "Call my sister."

    await answer_next(runner, live, turns, "After lunch.")
    assert len(turns) == 2
    assert sent_user(fake) == "Call my sister. After lunch."
    assert runner.conversation.history[0]["content"] == "Call my sister. After lunch."


def test_the_assistant_line_says_a_reply_was_cut_before_it_played() -> None:
    from services.timeline import assistant_said

    whole = TurnResult(1, "streamed", reply="Sure. ")
    assert assistant_said(whole) == "Sure."
    cut = TurnResult(2, "streamed", reply="Sure. I will", heard="Sure.", interrupted=True)
    assert assistant_said(cut) == "Sure.  [interrupted]"
    unplayed = TurnResult(3, "streamed", transcript="Call my sister.", interrupted=True)
    assert assistant_said(unplayed) == "[cut before a word of it was played]"


async def test_a_cut_by_a_noise_answers_the_cut_request_after_all(llm) -> None:  # noqa: F811
    """The voice that cut the reply was no words (a cough: Whisper hears nothing in it): the
    cut request is not left waiting for another utterance, that turn answers it."""
    fake, client = llm
    runner = await runner_for(fake, client)
    seg, turns, live = taker(runner, speculate=False)
    await cut_turn(runner, live, turns, "Call my sister.")
    answer = await answer_next(runner, live, turns, "", seconds=0.4)
    assert len(turns) == 2
    assert answer.error is None and answer.committed
    assert answer.transcript == "Call my sister." and sent_user(fake) == "Call my sister."
    assert asr_end(turns[1]).data["text"] == ""
    assert live.cuts.cut is None

"""Barge-in inside a real turn against the real llama-server.

The barge-in task (``BargeIn.scripted``, the same decider the microphone uses) interrupts
a turn mid-sentence while the model is still generating. Checked: the HTTP connection is
closed (the server log says it cancelled the task) and ``/slots`` is idle, the four
barge-in events come in order, the history keeps only what was heard (a prefix of the
generated text plus the interrupted mark), and the next turn still reuses the KV prefix.
TTS is a fast fake (steady 40 ms of audio per character); everything else is real.

The barge-in comes 1 s into playback, or later if the LLM has not yet written past what
played by then: on a loaded machine the server can write slower than the fake speaks,
and a cut must land inside a reply the server is still writing, not after all of it
played.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from pipeline.audio_out import RealtimeNullSink
from pipeline.bargein import BargeIn
from pipeline.conversation import Conversation
from pipeline.events import Event, EventName
from pipeline.heard import INTERRUPTED_MARK
from pipeline.llm_client import LlmClient
from pipeline.turn import TurnConfig, TurnRunner

pytestmark = pytest.mark.integration
RATE = 16000
CHARS_PER_S = 25  # SteadyTts: 40 ms of audio per character


class SteadyTts:
    sample_rate = RATE

    def synthesize(self, text: str) -> np.ndarray:
        return np.full(len(text) * RATE // CHARS_PER_S, 1000, dtype=np.int16)

    def abort(self, thread_id: int | None = None) -> None:
        """Instant synthesis: nothing is ever running to abort."""


def names(result: object) -> list[str]:
    return [e.name for e in result.events]  # type: ignore[attr-defined]


class AheadOfPlayback:
    """Barges in ``at_s`` into playback once the sentences written exceed what played.

    Played characters are known from the fake TTS's steady rate; written ones from
    ``splitter.sentence``. The margin keeps a few unplayed words in the reply."""

    def __init__(self, bargein: BargeIn, at_s: float, margin_chars: int = 20) -> None:
        self.bargein, self.at_s, self.margin = bargein, at_s, margin_chars
        self.written = 0
        self.started: float | None = None
        self.changed = asyncio.Event()

    def on_event(self, event: Event) -> None:
        if event.name == EventName.SENTENCE:
            self.written += len(event.data["text"]) + 1
        elif event.name == EventName.PLAYBACK_START and self.started is None:
            self.started = asyncio.get_running_loop().time()
        elif event.name == EventName.LLM_END:
            self.written = 10**9  # nothing more will come: let the deadline decide
        self.changed.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.started is None:
            self.changed.clear()
            await self.changed.wait()
        await asyncio.sleep(self.at_s)
        while True:
            played = (loop.time() - self.started) * CHARS_PER_S
            if self.written >= played + self.margin:
                break
            self.changed.clear()
            await self.changed.wait()
        self.bargein.trigger(f"ahead@{loop.time() - self.started:.1f}s")


async def test_interrupted_turn_stops_the_server_and_keeps_what_was_heard(llama_server):
    async with LlmClient(llama_server.url) as client:
        sink = RealtimeNullSink()
        await sink.open(RATE)
        runner = TurnRunner(None, client, SteadyTts(), sink, Conversation(),
                            TurnConfig(max_tokens=300, max_sentences=None, seed=7))
        bargein = BargeIn(runner)
        runner.listeners.append(bargein.on_event)
        log_before = llama_server.log_path.read_text(errors="replace").count("cancel task")

        # 1 s at 25 characters a second: past the four words a cut reply needs to be kept
        ahead = AheadOfPlayback(bargein, 1.0)
        runner.listeners.append(ahead.on_event)
        watcher = asyncio.create_task(ahead.run())
        first = await runner.run(text="Tell me the whole history of the bicycle, in detail.")
        await watcher

        assert first.error is None, first.error
        assert first.interrupted and first.metrics.interrupted is True
        seen = names(first)
        barge = [n for n in seen if n in ("bargein.detected", "playback.stopped",
                                          "llm.closed", "server.slot_idle")]
        assert barge[0] == "bargein.detected" and barge[-1] == "server.slot_idle"
        assert sorted(barge) == sorted(["bargein.detected", "playback.stopped",
                                        "llm.closed", "server.slot_idle"])
        idle = next(e for e in first.events if e.name == "server.slot_idle")
        assert idle.data["confirmed"] is True
        assert "llm.end" not in seen or seen.index("llm.end") > seen.index("llm.closed")
        slots = await client.get_json("/slots")
        assert not any(s.get("is_processing") for s in slots)
        # closed, not abandoned: llama-server logged the cancellation of the task
        for _ in range(50):
            log = llama_server.log_path.read_text(errors="replace")
            if log.count("cancel task") > log_before:
                break
            await asyncio.sleep(0.02)
        assert log.count("cancel task") > log_before
        m = first.metrics
        print(f"\nbarge-in → silence {m.bargein_to_silence_ms} ms, LLM closed "
              f"{m.bargein_to_llm_closed_ms} ms, slot idle {m.bargein_to_slot_idle_ms} ms")

        # the history ends where playback stopped: a prefix of what was generated + mark
        kept = runner.conversation.history[-1]["content"]
        assert kept.endswith(INTERRUPTED_MARK)
        heard = kept[: -len(INTERRUPTED_MARK)]
        assert first.reply.startswith(heard) and len(heard) < len(first.reply)
        assert first.heard == heard.strip()

        # the next turn's prompt still starts with the tokens the slot holds
        second = await runner.run(text="And who invented it?")
        assert second.error is None, second.error
        assert not second.interrupted
        assert second.metrics.cache_n and second.metrics.cache_n > 0
        print(f"follow-up turn: cache_n {second.metrics.cache_n}, "
              f"prompt_n {second.metrics.prompt_n}")
        await sink.close()

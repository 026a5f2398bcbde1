"""EngineWarmer and its wiring into the live turn-taker (fake engines; the real passes are
Whisper's and Piper's ``keep_warm``, timed in docs/live.md)."""

from __future__ import annotations

import asyncio
import threading

from test_live import RecordingSegmenter, pause, until
from test_live import llm as llm  # noqa: F401  (the fixture)
from test_turn import make_runner

from pipeline.live import LiveTurnTaker
from pipeline.mic import SpeechResumed, SpeechStart
from pipeline.warm import EngineWarmer


class Engine:
    def __init__(self) -> None:
        self.passes = 0
        self.threads: set[int] = set()

    def keep_warm(self) -> None:
        self.passes += 1
        self.threads.add(threading.get_ident())


class Remote:  # a Wyoming engine: nothing to warm here
    pass


async def test_passes_run_while_speaking_off_the_loop_and_stop_at_silence() -> None:
    asr, tts = Engine(), Engine()
    warmer = EngineWarmer([asr, tts, Remote()], ready=lambda: True, every_s=0.01)
    assert len(warmer.engines) == 2
    warmer.speaking()
    warmer.speaking()  # already running: not a second loop
    await until(lambda: asr.passes >= 3)
    warmer.silent()
    await asyncio.sleep(0.05)
    stopped_at = asr.passes
    await asyncio.sleep(0.05)
    assert asr.passes == stopped_at and tts.passes >= stopped_at - 1
    assert threading.get_ident() not in asr.threads  # blocking passes run in threads
    assert warmer.passes >= 3


async def test_no_pass_unless_ready_and_a_failing_engine_is_skipped() -> None:
    class Broken:
        def keep_warm(self) -> None:
            raise RuntimeError("model not loaded")

    ok, ready = Engine(), [False]
    warmer = EngineWarmer([Broken(), ok], ready=lambda: ready[0], every_s=0.01)
    warmer.speaking()
    await asyncio.sleep(0.05)
    assert ok.passes == 0
    ready[0] = True
    await until(lambda: ok.passes >= 2)
    warmer.silent()


async def test_the_taker_warms_while_the_voice_is_on_and_not_next_to_a_turn(llm) -> None:
    fake, client = llm
    runner = await make_runner(fake, client, max_sentences=1)
    engine = Engine()
    runner.asr.keep_warm = engine.keep_warm  # type: ignore[attr-defined]
    seg = RecordingSegmenter()
    live = LiveTurnTaker(runner, seg, on_turn=lambda turn: None)
    assert live.warmer is not None
    live.warmer.every_s = 0.01
    live.on_segment(SpeechStart(0))
    await until(lambda: engine.passes >= 2)
    seg.silence_ms = 96.0  # the voice went off: no new pass
    await asyncio.sleep(0.05)
    quiet = engine.passes
    await asyncio.sleep(0.05)
    assert engine.passes == quiet
    seg.silence_ms = 0.0
    live.on_segment(pause(1.0))  # the pause stops the warmer and starts a speculation
    await asyncio.sleep(0.05)
    assert engine.passes == quiet
    live.on_segment(SpeechResumed(16000, 250.0))  # the user goes on: speculation dropped
    await until(lambda: not runner.busy)
    await until(lambda: engine.passes > quiet)  # voice on, nothing running: warm again
    await live.close()
    off = LiveTurnTaker(runner, seg, on_turn=lambda turn: None, keep_warm=False)
    assert off.warmer is None
    off.on_segment(SpeechStart(0))
    await off.close()


def test_whisper_and_piper_have_keep_warm() -> None:
    from pipeline.asr import WhisperAsr
    from pipeline.tts import PiperTts
    from pipeline.warm import Warmable

    assert issubclass(WhisperAsr, Warmable) and issubclass(PiperTts, Warmable)

"""The microphone side: streaming Silero VAD and the utterance segmenter on recorded turns.

The segmenter is pure, so it is fed the shipped WAVs (real speech, with silence around
them) block by block, exactly as the microphone would deliver them; ``FakeMic`` delivers
20 ms blocks every 20 ms for the async path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest

from pipeline.audio_in import load_wav
from pipeline.mic import (
    SAMPLE_RATE,
    WINDOW,
    GuardedGate,
    MicBlock,
    MicSource,
    SegmenterConfig,
    SileroStream,
    SpeechGap,
    SpeechPause,
    SpeechResumed,
    SpeechStart,
    SpeechSustained,
    UtteranceEnd,
    UtteranceSegmenter,
)

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
BLOCK = SAMPLE_RATE // 50  # 20 ms


def silence(seconds: float) -> np.ndarray:
    # a faint noise floor, like a real room, rather than digital zeros
    rng = np.random.default_rng(7)
    return (rng.standard_normal(int(seconds * SAMPLE_RATE)) * 0.001).astype(np.float32)


def speech(name: str) -> np.ndarray:
    return load_wav(SAMPLES / name)


class FakeMic:
    """Yields ``signal`` as 20 ms blocks at real-time pace (absolute schedule, no drift)."""

    def __init__(self, signal: np.ndarray, block: int = BLOCK) -> None:
        self.signal, self.block = signal, block
        self.delivered = 0

    def __aiter__(self) -> AsyncIterator[MicBlock]:
        return self._blocks()

    async def _blocks(self) -> AsyncIterator[MicBlock]:
        start = time.monotonic()
        for i in range(0, self.signal.size, self.block):
            due = start + (i + self.block) / SAMPLE_RATE  # a block exists once recorded
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            self.delivered += 1
            yield MicBlock(self.signal[i:i + self.block], time.monotonic())


def run(segmenter: UtteranceSegmenter, signal: np.ndarray,
        block: int = BLOCK) -> list[object]:
    events: list[object] = []
    for i in range(0, signal.size, block):
        events.extend(segmenter.feed(signal[i:i + block]))
    return events + segmenter.flush()


@pytest.fixture(scope="module")
def vad() -> SileroStream:
    return SileroStream()


def test_streamed_probabilities_equal_faster_whispers_batch(vad: SileroStream) -> None:
    from faster_whisper.vad import get_vad_model

    audio = speech("03_sky_blue.wav")
    audio = audio[: audio.size // WINDOW * WINDOW]
    batch = np.asarray(get_vad_model()(audio)).reshape(-1)
    vad.reset()
    streamed = [vad.window(w) for w in audio.reshape(-1, WINDOW)]
    np.testing.assert_allclose(streamed, batch, atol=1e-5)


@pytest.mark.parametrize("name", ["01_sleep_tips.wav", "04_cup_of_tea.wav",
                                  "05_hiking_trip.wav"])
def test_one_utterance_per_recorded_turn(vad: SileroStream, name: str) -> None:
    voice = speech(name)
    lead = 1.0
    signal = np.concatenate([silence(lead), voice, silence(1.5)])
    vad.reset()
    events = run(UtteranceSegmenter(vad), signal)
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["SpeechStart", "SpeechSustained", "UtteranceEnd"]
    start, sustained, end = events
    assert isinstance(start, SpeechStart) and isinstance(end, UtteranceEnd)
    assert isinstance(sustained, SpeechSustained)
    # the WAVs carry 0.3 s of silence at both ends: speech is inside [lead, lead + len]
    assert lead * SAMPLE_RATE <= start.sample <= (lead + 0.6) * SAMPLE_RATE
    assert end.end_sample <= (lead * SAMPLE_RATE + voice.size)
    assert sustained.sample - start.sample >= 300 * SAMPLE_RATE // 1000
    # the end is decided end_silence_ms (600) after the speech ended, to the window
    assert end.detected_sample - end.end_sample == pytest.approx(0.6 * SAMPLE_RATE,
                                                                 abs=WINDOW)
    # the utterance keeps the speech (with a little pre-roll), not the silences
    assert 0.6 * voice.size < end.audio.size < voice.size + 0.5 * SAMPLE_RATE


def test_block_size_does_not_change_the_segmentation(vad: SileroStream) -> None:
    signal = np.concatenate([silence(0.5), speech("03_sky_blue.wav"), silence(1.0)])
    results = []
    for block in (320, 512, 1000, 4096):
        vad.reset()
        ends = [e for e in run(UtteranceSegmenter(vad), signal, block)
                if isinstance(e, UtteranceEnd)]
        results.append([(e.start_sample, e.end_sample) for e in ends])
    assert all(r == results[0] for r in results)


def test_two_questions_with_a_pause_are_two_utterances(vad: SileroStream) -> None:
    a, b = speech("01_sleep_tips.wav"), speech("06_learn_language.wav")
    signal = np.concatenate([silence(0.5), a, silence(1.0), b, silence(1.0)])
    vad.reset()
    ends = [e for e in run(UtteranceSegmenter(vad), signal) if isinstance(e, UtteranceEnd)]
    assert len(ends) == 2
    assert ends[0].end_sample < (0.5 * SAMPLE_RATE + a.size) < ends[1].start_sample


def test_end_silence_is_configurable(vad: SileroStream) -> None:
    a = speech("01_sleep_tips.wav")
    # with 300 ms of end silence the gap below splits; with 1500 ms it does not
    signal = np.concatenate([silence(0.5), a, silence(0.4), a, silence(2.0)])
    counts = {}
    for end_ms in (300, 1500):
        vad.reset()
        seg = UtteranceSegmenter(vad, SegmenterConfig(end_silence_ms=end_ms))
        counts[end_ms] = sum(isinstance(e, UtteranceEnd) for e in run(seg, signal))
    assert counts == {300: 2, 1500: 1}


def test_silence_and_a_click_make_no_utterance(vad: SileroStream) -> None:
    click = np.zeros(SAMPLE_RATE // 10, dtype=np.float32)
    click[:80] = 0.9
    signal = np.concatenate([silence(1.0), click, silence(1.0)])
    vad.reset()
    assert run(UtteranceSegmenter(vad), signal) == []


def test_utterance_is_transcribed_as_the_question(vad: SileroStream) -> None:
    """The cut audio is what Whisper needs: nothing of the question is lost."""
    import json

    from models_fixture import whisper_model_dir

    from pipeline.asr import WhisperAsr

    expected = json.loads((SAMPLES / "transcripts.json").read_text())["03_sky_blue.wav"]
    signal = np.concatenate([silence(0.7), speech("03_sky_blue.wav"), silence(1.0)])
    vad.reset()
    (end,) = [e for e in run(UtteranceSegmenter(vad), signal) if isinstance(e, UtteranceEnd)]
    asr = WhisperAsr(whisper_model_dir())
    text = asr.transcribe(end.audio)
    assert text.lower().strip(" ?.") == expected.lower().strip(" ?.")


async def test_fake_mic_paces_blocks_and_segments_live(vad: SileroStream) -> None:
    signal = np.concatenate([silence(0.3), speech("03_sky_blue.wav"), silence(0.8)])
    mic = FakeMic(signal)
    seg = UtteranceSegmenter(vad)
    vad.reset()
    started = time.monotonic()
    ended_at = None
    async for block in mic:
        for ev in seg.feed(block.samples):
            if isinstance(ev, UtteranceEnd):
                ended_at = block.t - started
    elapsed = time.monotonic() - started
    assert mic.delivered == -(-signal.size // BLOCK)
    assert elapsed >= signal.size / SAMPLE_RATE - 0.02  # real time, not faster
    assert ended_at is not None


# --- speculative start: pauses, resumptions, an end the endpoint policy sets ---------------


def voiced(name: str) -> np.ndarray:
    """A shipped question without the silence recorded around it."""
    audio = speech(name)
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    return audio[loud[0]:loud[-1] + 1]


def paused_utterance(pause_s: float) -> np.ndarray:
    """Two real questions joined by a pause of ``pause_s``: one utterance, paused."""
    return np.concatenate([silence(0.5), voiced("03_sky_blue.wav"), silence(pause_s),
                           voiced("04_cup_of_tea.wav"), silence(1.5)])


def test_pause_then_resume_then_one_utterance(vad: SileroStream) -> None:
    cfg = SegmenterConfig(pause_ms=200, end_silence_ms=1200)
    events = run(UtteranceSegmenter(vad, cfg), paused_utterance(0.7))
    kinds = [type(e).__name__ for e in events if not isinstance(e, SpeechSustained)]
    # The samples have silence of their own around the words, so count from the real
    # shape: a pause inside the utterance, speech again, then the one end.
    assert kinds[0] == "SpeechStart" and kinds[-1] == "UtteranceEnd"
    assert "SpeechPause" in kinds and "SpeechResumed" in kinds
    assert kinds.count("UtteranceEnd") == 1
    pause = next(e for e in events if isinstance(e, SpeechPause))
    resumed = next(e for e in events if isinstance(e, SpeechResumed))
    end = events[-1]
    assert isinstance(end, UtteranceEnd)
    assert pause.end_sample < resumed.sample < end.end_sample
    assert pause.detected_sample - pause.end_sample >= 200 * SAMPLE_RATE // 1000
    assert resumed.pause_ms >= 200
    # the speculation's audio is the utterance so far, not more
    assert pause.audio.size < end.audio.size


def test_a_gap_comes_before_each_pause_with_the_same_last_voiced_sample(
        vad: SileroStream) -> None:
    cfg = SegmenterConfig(pause_ms=200, gap_ms=96, end_silence_ms=1200)
    events = run(UtteranceSegmenter(vad, cfg), paused_utterance(0.7))
    pauses = [e for e in events if isinstance(e, SpeechPause)]
    gaps = [e for e in events if isinstance(e, SpeechGap)]
    assert pauses and len(gaps) >= len(pauses)
    for pause in pauses:
        # The gap of the same silence: before it in the stream, the same words so far.
        gap = next(g for g in gaps if g.end_sample == pause.end_sample)
        position = {id(e): i for i, e in enumerate(events)}
        assert position[id(gap)] < position[id(pause)]
        assert gap.start_sample == pause.start_sample
        assert 96 <= (gap.detected_sample - gap.end_sample) * 1000 / SAMPLE_RATE < 200
        voiced = gap.end_sample - gap.start_sample
        assert np.array_equal(gap.audio[:voiced], pause.audio[:voiced])
    # One gap per silence: none repeats the last voiced sample of another.
    assert len({g.end_sample for g in gaps}) == len(gaps)


def test_no_pause_events_unless_asked(vad: SileroStream) -> None:
    events = run(UtteranceSegmenter(vad, SegmenterConfig()), paused_utterance(0.7))
    assert not any(isinstance(e, SpeechGap | SpeechPause | SpeechResumed) for e in events)


def test_end_after_ends_the_utterance_early(vad: SileroStream) -> None:
    seg = UtteranceSegmenter(vad, SegmenterConfig(pause_ms=200, end_silence_ms=2000))
    signal = np.concatenate([silence(0.3), voiced("03_sky_blue.wav"), silence(1.0)])
    pauses = []
    ended: list[UtteranceEnd] = []
    for i in range(0, signal.size, BLOCK):
        for ev in seg.feed(signal[i:i + BLOCK]):
            if isinstance(ev, SpeechPause) and not pauses:
                pauses.append(ev)
                seg.end_after(250)  # the policy answers "complete": 250 ms is enough
            elif isinstance(ev, UtteranceEnd):
                ended.append(ev)
    assert pauses and len(ended) == 1
    waited = (ended[0].detected_sample - ended[0].end_sample) * 1000 / SAMPLE_RATE
    assert 250 <= waited < 400  # not the 2000 ms default


def test_end_after_is_forgotten_when_speech_resumes(vad: SileroStream) -> None:
    seg = UtteranceSegmenter(vad, SegmenterConfig(pause_ms=200, end_silence_ms=1500))
    events: list[object] = []
    signal = paused_utterance(0.5)
    for i in range(0, signal.size, BLOCK):
        for ev in seg.feed(signal[i:i + BLOCK]):
            events.append(ev)
            if isinstance(ev, SpeechPause):
                seg.end_after(600)  # "incomplete": longer than the 500 ms pause
    ends = [e for e in events if isinstance(e, UtteranceEnd)]
    assert len(ends) == 1  # the 500 ms pause did not end it; the question did


def test_a_held_end_waits_for_its_release(vad: SileroStream) -> None:
    seg = UtteranceSegmenter(vad, SegmenterConfig(pause_ms=200, end_silence_ms=2000))
    signal = np.concatenate([silence(0.3), voiced("03_sky_blue.wav"), silence(2.0)])
    ended: list[UtteranceEnd] = []
    paused_at = released_at = None
    for i in range(0, signal.size, BLOCK):
        if paused_at is not None and released_at is None and seg.silence_ms >= 700:
            released_at = seg.position
            seg.release_end()  # the reply is ready 700 ms into the silence
        for ev in seg.feed(signal[i:i + BLOCK]):
            if isinstance(ev, SpeechPause) and paused_at is None:
                paused_at = ev.detected_sample
                seg.end_after(250, held=True)  # "complete", but nothing to play yet
            elif isinstance(ev, UtteranceEnd):
                ended.append(ev)
    assert released_at is not None and len(ended) == 1
    # Not at 250 ms: the end came with the release, one window later at most.
    assert released_at <= ended[0].detected_sample <= released_at + 2 * WINDOW


def test_a_held_end_is_taken_after_the_cap(vad: SileroStream) -> None:
    cfg = SegmenterConfig(pause_ms=200, end_silence_ms=2000, held_end_max_ms=900)
    seg = UtteranceSegmenter(vad, cfg)
    signal = np.concatenate([silence(0.3), voiced("03_sky_blue.wav"), silence(2.0)])
    ended: list[UtteranceEnd] = []
    for i in range(0, signal.size, BLOCK):
        for ev in seg.feed(signal[i:i + BLOCK]):
            if isinstance(ev, SpeechPause):
                seg.end_after(250, held=True)  # and never released
            elif isinstance(ev, UtteranceEnd):
                ended.append(ev)
    assert len(ended) == 1
    waited = (ended[0].detected_sample - ended[0].end_sample) * 1000 / SAMPLE_RATE
    assert 900 <= waited < 1000


def test_voice_during_a_held_end_continues_the_utterance(vad: SileroStream) -> None:
    seg = UtteranceSegmenter(vad, SegmenterConfig(pause_ms=200, end_silence_ms=1500))
    events: list[object] = []
    signal = paused_utterance(0.7)  # a 700 ms pause, longer than the 250 ms judged
    for i in range(0, signal.size, BLOCK):
        for ev in seg.feed(signal[i:i + BLOCK]):
            events.append(ev)
            if isinstance(ev, SpeechPause):
                # Held at the first pause (the reply not ready in its 700 ms); the second
                # pause is the real end, judged "complete" and with its reply ready.
                first = sum(isinstance(e, SpeechPause) for e in events) == 1
                seg.end_after(250, held=first)
    ends = [e for e in events if isinstance(e, UtteranceEnd)]
    assert len(ends) == 1 and any(isinstance(e, SpeechResumed) for e in events)
    assert ends[0].speech_ms > 2000  # both questions: one utterance


def test_end_now_closes_the_utterance_at_once(vad: SileroStream) -> None:
    seg = UtteranceSegmenter(vad, SegmenterConfig(pause_ms=200, end_silence_ms=2000))
    signal = np.concatenate([silence(0.3), voiced("03_sky_blue.wav"), silence(0.4)])
    events: list[object] = []
    for i in range(0, signal.size, BLOCK):
        events.extend(seg.feed(signal[i:i + BLOCK]))
    assert any(isinstance(e, SpeechPause) for e in events)
    ended = seg.end_now()
    assert isinstance(ended, UtteranceEnd) and not seg.in_speech
    assert ended.detected_sample == seg.position
    assert seg.end_now() is None  # nothing left to end


def test_on_end_hears_of_every_utterance_however_it_ended(vad: SileroStream) -> None:
    """``talk --record`` hangs on ``on_end``: an end taken by a window and one taken by the
    live turn-taker (``end_now``) both reach it, a click dropped as too short does not."""
    seg = UtteranceSegmenter(vad, SegmenterConfig(pause_ms=200, end_silence_ms=600))
    told: list[UtteranceEnd] = []
    seg.on_end = told.append
    by_window = run(seg, np.concatenate([silence(0.3), voiced("03_sky_blue.wav"), silence(1.0)]))
    ends = [e for e in by_window if isinstance(e, UtteranceEnd)]
    assert len(ends) == 1 and told == ends
    clip = np.concatenate([voiced("04_cup_of_tea.wav"), silence(0.3)])  # a pause, no end
    for i in range(0, clip.size, BLOCK):
        seg.feed(clip[i:i + BLOCK])
    now = seg.end_now()
    assert now is not None and told == [ends[0], now]
    run(seg, np.concatenate([silence(0.3), 0.5 * np.ones(800, np.float32), silence(1.0)]))
    assert len(told) == 2  # the click was no utterance


class ScriptedVad:
    """A window's speech probability is written in its samples (for the gate's tests)."""

    def window(self, samples: np.ndarray) -> float:
        return float(samples[0])

    def reset(self) -> None:
        pass


def windows_of(*probs: float) -> np.ndarray:
    return np.concatenate([np.full(WINDOW, p, np.float32) for p in probs])


# The echo guard's shape: speech only above 0.8; the softer onset test above 0.35.
STRICT = GuardedGate(lambda prob, rms: prob >= 0.8, lambda prob, rms: prob >= 0.35)


def started_at(signal: np.ndarray, gate: object, backtrack_ms: int = 1000) -> int | None:
    seg = UtteranceSegmenter(ScriptedVad(), SegmenterConfig(onset_backtrack_ms=backtrack_ms,
                                                            pre_roll_ms=64))
    seg.feed(signal, gate)  # type: ignore[arg-type]
    return seg.first_sample


def test_a_start_under_the_guard_reaches_back_over_the_softer_onset() -> None:
    # silence, then six windows the guard rejected but the onset test passes, then speech
    signal = windows_of(0, 0, 0, 0, 0.1, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9)
    # the six onset windows and two windows of pre-roll before them
    assert started_at(signal, STRICT) == 3 * WINDOW
    # before: the pre-roll alone, the six windows lost
    assert started_at(signal, STRICT, backtrack_ms=0) == 9 * WINDOW


def test_the_reach_back_stops_at_a_window_below_the_onset_test_and_at_its_limit() -> None:
    gap = windows_of(*([0.0] * 10), 0.5, 0.5, 0.2, 0.5, 0.5, 0.9)
    assert started_at(gap, STRICT) == 11 * WINDOW  # two onset windows + 2 pre-roll
    long = windows_of(*([0.5] * 40), 0.9)
    # 1000 ms is 31 windows (of 32 ms), then the 64 ms pre-roll
    assert started_at(long, STRICT) == (40 - 31 - 2) * WINDOW


def test_without_the_guard_the_start_keeps_its_pre_roll_only() -> None:
    signal = windows_of(0, 0, 0, 0, 0.4, 0.4, 0.4, 0.9)
    assert started_at(signal, None) == 5 * WINDOW  # 0.4 is not speech; 2 pre-roll windows
    assert started_at(signal, lambda prob, rms: prob >= 0.8) == 5 * WINDOW


class EndedStream:
    """A PortAudio input stream as seen from outside: ``active`` goes False by itself
    when its callback thread fails (the sound server gone), while ``stopped`` stays False
    (nobody stopped it)."""

    def __init__(self, active: bool) -> None:
        self.active, self.stopped = active, False


def ended_microphone(monkeypatch: pytest.MonkeyPatch,
                     opens_as: object) -> tuple[MicSource, list[object]]:
    """A MicSource whose stream ended by itself after one block, and the list of its
    tries to open the device again: each gives ``opens_as`` (a stream, or an exception
    to raise)."""
    from pipeline import mic as mic_module

    monkeypatch.setattr(mic_module, "_CHECK_S", 0.02)
    monkeypatch.setattr(mic_module, "REOPEN_S", 0.1)
    monkeypatch.setattr(mic_module, "import_sounddevice", lambda: None)
    monkeypatch.setattr(mic_module, "close_stream", lambda stream: None)
    source = MicSource("usb mic")
    tries: list[object] = []

    def open_again(sd: object) -> object:
        tries.append(sd)
        if isinstance(opens_as, BaseException):
            raise opens_as
        return opens_as

    monkeypatch.setattr(source, "_open", open_again)
    source._loop = asyncio.get_running_loop()
    source._stream = EndedStream(active=False)
    source._put(MicBlock(np.zeros(320, np.float32), 0.0))  # what came before still comes
    return source, tries


async def test_a_microphone_whose_stream_ended_and_stays_gone_is_an_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.sound_device import AudioDeviceError

    source, tries = ended_microphone(monkeypatch, AudioDeviceError("cannot open it"))
    got = []
    with pytest.raises(AudioDeviceError, match="'usb mic' stopped delivering audio .* did "
                       "not come back in 0 s; check it"):
        async for block in source:
            got.append(block)
    assert len(got) == 1
    assert len(tries) >= 2  # tried every _CHECK_S until REOPEN_S


async def test_a_microphone_whose_stream_ended_is_opened_again_and_goes_on(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The sound server restarted: the device opens again and its blocks come as before."""
    back = EndedStream(active=True)
    source, tries = ended_microphone(monkeypatch, back)
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, source._put, MicBlock(np.ones(320, np.float32), 1.0))
    loop.call_later(0.3, source._put, None)  # close()
    got = [block.t async for block in source]
    assert got == [0.0, 1.0]
    assert len(tries) == 1 and source.reopened == 1 and source._stream is back
    said = [r.getMessage() for r in caplog.records]
    assert any("'usb mic' is back" in m for m in said), said


async def test_a_microphone_closed_while_it_is_opened_again_ends_its_blocks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.sound_device import AudioDeviceError

    source, tries = ended_microphone(monkeypatch, AudioDeviceError("cannot open it"))
    asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(source.close()))
    got = await asyncio.wait_for(_collect(source), 2)  # no error: it was closed, not lost
    assert len(got) == 1 and len(tries) >= 1


async def _collect(source: MicSource) -> list[MicBlock]:
    return [block async for block in source]


async def test_a_quiet_but_open_microphone_is_warned_about_once_and_kept(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A PulseAudio null sink's monitor delivers nothing for up to ~3 s after opening, so
    silence from an open stream is logged, not an error; a block resets the warning."""
    from pipeline import mic as mic_module

    monkeypatch.setattr(mic_module, "_CHECK_S", 0.01)
    monkeypatch.setattr(mic_module, "_QUIET_WARN_S", 0.05)
    source = MicSource()
    source._stream = EndedStream(active=True)
    loop = asyncio.get_running_loop()
    for at in (0.2, 0.4):
        loop.call_later(at, source._put, MicBlock(np.zeros(320, np.float32), 0.0))
    loop.call_later(0.6, source._put, None)  # close()
    got = [block async for block in source]
    assert len(got) == 2
    warnings = [r for r in caplog.records if "delivered no audio" in r.getMessage()]
    assert len(warnings) == 3  # before each block and before the end: once per quiet spell


def test_a_microphone_the_loop_fell_behind_drops_the_oldest_and_says_so_once(
        caplog: pytest.LogCaptureFixture) -> None:

    source = MicSource(block_ms=20, max_queued_s=0.1)  # 5 blocks
    for t in range(8):
        source._put(MicBlock(np.zeros(320, np.float32), float(t)))
    assert source.overflows == 3
    assert source._queue.get_nowait().t == 3.0  # the oldest went
    warned = [r for r in caplog.records if "behind the microphone" in r.getMessage()]
    assert len(warned) == 1 and "0.1 s behind" in warned[0].getMessage()
    while not source._queue.empty():  # caught up
        source._queue.get_nowait()
    for t in range(8, 15):
        source._put(MicBlock(np.zeros(320, np.float32), float(t)))
    assert len([r for r in caplog.records if "behind the microphone" in r.getMessage()]) == 2

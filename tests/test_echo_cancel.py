"""The echo canceller (pipeline/echo_cancel.py): the real WebRTC processing module on a
known echo, decided block by block on the microphone's clock (no real-time wait)."""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

import numpy as np
import pytest
from script_module import load_script

from pipeline.audio_in import load_wav
from pipeline.bargein import EchoGuard
from pipeline.echo_cancel import ECHO_TAIL_S, FAR_LEAD_S, EchoCanceller
from pipeline.mic import SAMPLE_RATE, MicBlock, SileroStream
from pipeline.playback_tap import PlaybackTap, played_during

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
ECHO_GUARD = load_script("bench_echo_guard")
BLOCK = SAMPLE_RATE // 50


@pytest.fixture(scope="module")
def vad() -> SileroStream:
    return SileroStream()


@pytest.fixture(scope="module")
def voice() -> np.ndarray:
    """The assistant's voice at 16 kHz, float: two Piper sentences back to back."""
    return np.concatenate([load_wav(SAMPLES / "02_bicycle_history.wav"),
                           load_wav(SAMPLES / "01_sleep_tips.wav")])


def cancelled(mic: np.ndarray, played: np.ndarray) -> np.ndarray:
    canceller = EchoCanceller(ECHO_GUARD.KnownPlayback(played))
    return np.concatenate([canceller.process(MicBlock(mic[i:i + BLOCK], (i + BLOCK) / SAMPLE_RATE)
                                             ).samples
                           for i in range(0, mic.size - BLOCK + 1, BLOCK)])


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x, dtype=np.float64))))


def test_played_during_resamples_what_was_played_at_that_time() -> None:
    rate = 22050
    ramp = np.arange(rate, dtype=np.float32) / rate  # 1 s, 0 -> 1
    out = played_during(ramp, rate, start=10.0, t0=10.5, t1=10.52, out_rate=SAMPLE_RATE)
    assert out.size == 320
    assert out[0] == pytest.approx(0.5, abs=1e-4)
    assert out[-1] == pytest.approx(0.5 + 319 / SAMPLE_RATE, abs=1e-4)
    before = played_during(ramp, rate, start=10.0, t0=9.99, t1=10.01, out_rate=SAMPLE_RATE)
    assert not before[:160].any() and before[161:].all()  # nothing before it started
    assert not played_during(ramp, rate, 10.0, 11.5, 11.6, SAMPLE_RATE).any()  # it ended


class Device:
    """A sink that plays ``blocks`` (when each was heard, samples) once ``play`` is let go."""

    sample_rate = 16000

    def __init__(self) -> None:
        self.blocks: list[tuple[float, int]] = []
        self.go = asyncio.Event()

    def heard_blocks(self) -> list[tuple[float, int]]:
        return list(self.blocks)

    async def play(self, samples: np.ndarray) -> int:
        await self.go.wait()
        self.go.clear()
        return samples.size


async def played(tap: PlaybackTap, device: Device, audio: np.ndarray,
                 blocks: list[tuple[float, int]]) -> None:
    task = asyncio.create_task(tap.play((audio * 32768).astype(np.int16)))
    await asyncio.sleep(0)
    device.blocks = blocks
    device.go.set()
    await task


async def test_the_tap_gives_the_far_end_of_every_sentence_it_played() -> None:
    device = Device()
    tap = PlaybackTap(device)  # type: ignore[arg-type]
    one = np.full(16000, 0.25, np.float32)
    await played(tap, device, one, [(100.0, 16000)])
    await played(tap, device, one, [(101.5, 16000)])
    far = tap.played_between(100.9, 101.6, SAMPLE_RATE)
    assert far[:int(0.09 * SAMPLE_RATE)] == pytest.approx(0.25)  # the first sentence
    assert not far[int(0.11 * SAMPLE_RATE):int(0.59 * SAMPLE_RATE)].any()  # between them
    assert far[int(0.61 * SAMPLE_RATE):] == pytest.approx(0.25)  # the second


async def test_an_output_that_ran_dry_delays_the_rest_of_the_far_end() -> None:
    """Under load the device can play nothing for a while in the middle of a sentence; the
    rest is heard that much later, and so must the far end be (a far end dated from the
    first sample alone let the echo through: pipeline/playback_tap.py)."""
    device = Device()
    tap = PlaybackTap(device)  # type: ignore[arg-type]
    ramp = np.arange(4800, dtype=np.float32) / 4800  # 0.3 s
    await played(tap, device, ramp, [(10.0, 1600), (10.1, 1600), (10.3, 1600)])
    far = tap.played_between(10.0, 10.4, SAMPLE_RATE)
    assert far[1599] == pytest.approx(ramp[1599], abs=1e-3)  # the first two blocks in a row
    assert far[3000] == pytest.approx(ramp[3000], abs=1e-3)
    assert not far[int(0.201 * SAMPLE_RATE):int(0.299 * SAMPLE_RATE)].any()  # ran dry
    assert far[4800] == pytest.approx(ramp[3200], abs=1e-3)  # the rest, 100 ms later
    assert tap.underrun_s == pytest.approx(0.1)
    # the loudest 20 ms of the 300 ms before: what was heard before it ran dry
    assert tap.level(10.28) == pytest.approx(rms(ramp[2880:3200]), rel=1e-3)


async def test_a_device_that_has_taken_no_block_yet_leaves_the_far_end_as_scheduled() -> None:
    """The tap asks while a play waits for the device (opened again after the sound
    server restarted, say): an empty block list, after blocks had been seen, keeps the
    schedule from the play call instead of failing (an IndexError ended talk)."""
    device = Device()
    tap = PlaybackTap(device)  # type: ignore[arg-type]
    task = asyncio.create_task(tap.play(np.full(1600, 8000, np.int16)))
    await asyncio.sleep(0)
    device.blocks = [(10.0, 800)]  # the last play's, still reported
    tap.played_between(10.0, 10.1, SAMPLE_RATE)
    device.blocks = []  # the new play started: nothing heard of it yet
    assert tap.played_between(10.0, 10.1, SAMPLE_RATE).size == 1600
    device.blocks = [(10.0, 1600)]
    device.go.set()
    await task
    assert tap.played_between(10.0, 10.1, SAMPLE_RATE) == pytest.approx(8000 / 32768)


def test_the_echo_of_the_reply_is_taken_out(voice: np.ndarray) -> None:
    mic = ECHO_GUARD.mix(voice, 0.5, None, 0.0)
    out = cancelled(mic, voice)
    settled = slice(2 * SAMPLE_RATE, voice.size)  # AEC3 adapts within the first second
    assert rms(out[settled]) < 0.1 * rms(mic[settled])  # at least 20 dB less echo


def test_with_nothing_played_the_microphone_is_handed_on_untouched(voice: np.ndarray) -> None:
    user = load_wav(SAMPLES / "05_hiking_trip.wav")
    assert np.array_equal(cancelled(user[:user.size // BLOCK * BLOCK], np.zeros(0)),
                          user[:user.size // BLOCK * BLOCK])
    # after a reply, once its echo can no longer be heard, untouched again
    after = voice.size + int((ECHO_TAIL_S + 0.1) * SAMPLE_RATE)
    mic = np.concatenate([ECHO_GUARD.mix(voice, 0.5, None, 0.0),
                          np.zeros(SAMPLE_RATE, np.float32), user])[:after + 16000]
    out = cancelled(mic, voice)
    start = after // BLOCK * BLOCK + BLOCK
    assert np.array_equal(out[start:], mic[start:out.size])


async def test_a_user_as_loud_as_the_samples_barges_in_over_an_echo_behind_it(vad, voice):
    """Over a 0.5 echo the guard alone hears a user at the samples' level late or not at
    all (scripts/bench_echo_guard.py: 38 of 162 onsets); behind the canceller, on every
    one of these, within 1.25 s of the start. (A user who starts within the reply's first
    ~0.25 s, before AEC3 has adapted, gets through on about half the onsets, with or
    without ``FAR_LEAD_S``: docs/talk.md.)"""
    user = load_wav(SAMPLES / "06_learn_language.wav")
    starts = [0.5, 1.0, 1.5]

    async def heard(version: str) -> list[float | None]:
        return [await ECHO_GUARD.barge_in_at(vad, ECHO_GUARD.mix(voice, 0.5, user, at),
                                             voice, version) for at in starts]

    cancelled = await heard("cancelled")
    late = [(start, at) for at, start in zip(cancelled, starts, strict=True)
            if at is None or at - start >= 1.25]
    assert not late, f"(start, barge-in) s: {late}"
    guard_alone = await heard("shipped")  # the same audio without the canceller
    assert any(alone is None or alone - start > 1.5
               for alone, start in zip(guard_alone, starts, strict=True)), guard_alone


async def test_the_echo_alone_does_not_barge_in_behind_the_canceller(vad, voice):
    for echo in (0.5, 1.0):
        fired = await ECHO_GUARD.barge_in_at(vad, ECHO_GUARD.mix(voice, echo, None, 0.0),
                                             voice, "cancelled")
        assert fired is None, f"the assistant interrupted itself at {fired} s (echo {echo})"


async def test_a_residual_the_canceller_lets_through_does_not_interrupt(vad) -> None:
    """The echo of a real CI run (tests/recordings/README.md) at the far-end alignments
    where AEC3 let a speech-like residual through and the guard of session 27 fired; the
    microphone's own level then holds no more than the echo."""
    folder = ECHO_GUARD.RECORDED
    rows = await ECHO_GUARD.recorded_echo(vad, folder, ["cancelled", "cancelled-s27"],
                                          [40, 90, 100, 120])
    fired = {row["version"]: row["fired_s"] for row in rows}
    assert fired["cancelled"] == [None] * 4, fired
    assert any(f is not None for f in fired["cancelled-s27"]), fired  # the failure, kept


def test_talk_puts_the_canceller_first_unless_told_otherwise() -> None:
    from services.talk import echo_mode, echo_path

    mic: list[MicBlock] = []
    tap = PlaybackTap(None)  # type: ignore[arg-type]

    def args(**kw: bool) -> argparse.Namespace:
        return argparse.Namespace(**({"headphones": False, "echo_cancel": True} | kw))

    blocks, guard = echo_path(mic, tap, args())  # type: ignore[arg-type]
    assert blocks is not mic and guard == EchoGuard.behind_canceller()
    assert echo_mode(args()) == "echo canceller"
    blocks, guard = echo_path(mic, tap, args(echo_cancel=False))  # type: ignore[arg-type]
    assert blocks is mic and guard.enabled and guard.extra_ms == EchoGuard().extra_ms
    blocks, guard = echo_path(mic, tap, args(headphones=True))  # type: ignore[arg-type]
    assert blocks is mic and not guard.enabled


class Recording:
    """A far end that remembers which intervals it was asked for."""

    def __init__(self) -> None:
        self.asked: list[tuple[float, float]] = []

    def played_between(self, t0: float, t1: float, rate: int) -> np.ndarray:
        self.asked.append((t0, t1))
        return np.zeros(round((t1 - t0) * rate), np.float32)

    def level(self, t: float) -> float:
        return 0.0


def test_the_far_end_stays_one_stream_when_blocks_arrive_together() -> None:
    """PortAudio often hands over two microphone blocks at once, with the same arrival
    time. Asking the far end for the same 20 ms twice (and skipping the next) broke the
    canceller's echo model on the real echo path: echo came through and the assistant
    interrupted itself."""
    far = Recording()
    canceller = EchoCanceller(far)
    silence = np.zeros(BLOCK, np.float32)
    for t in (1.02, 1.06, 1.06, 1.10, 1.10):  # pairs
        canceller.process(MicBlock(silence, t))
    assert far.asked[0] == pytest.approx((1.0 + FAR_LEAD_S, 1.02 + FAR_LEAD_S))  # ahead
    starts = [round(a - FAR_LEAD_S, 3) for a, _ in far.asked]
    assert starts == [1.0, 1.02, 1.04, 1.06, 1.08]


def test_a_late_callback_does_not_move_the_far_end_but_lost_samples_do() -> None:
    """A callback 127 ms late hands over its blocks in a burst, none lost: moving the far
    end ahead for the burst and back (as when it followed every arrival more than 100 ms
    off) left the echo uncancelled for seconds (test_echo_guard_pulseaudio, CPU busy).
    Samples lost (arrival stays ahead of the count) do move it, once it lasts."""
    far = Recording()
    canceller = EchoCanceller(far)
    silence = np.zeros(BLOCK, np.float32)
    late = [1.02, 1.04, 1.187, 1.187, 1.187, 1.187, 1.187, 1.187, 1.2, 1.22]
    for t in late:
        canceller.process(MicBlock(silence, t))
    starts = [round(a - FAR_LEAD_S, 3) for a, _ in far.asked]
    assert starts == [round(1.0 + 0.02 * k, 3) for k in range(len(late))]
    assert canceller.resyncs == 0
    # now 2 s of samples are lost: the blocks arrive on time, 2 s past their count
    for k in range(20):
        canceller.process(MicBlock(silence, 3.22 + 0.02 * k))
    assert canceller.resyncs == 1
    assert round(far.asked[-1][0] - FAR_LEAD_S, 3) == round(3.2 + 0.02 * 19, 3)  # arrival


async def test_the_tap_dates_a_sentence_from_when_the_device_played_it() -> None:
    device = Device()
    tap = PlaybackTap(device)  # type: ignore[arg-type]
    task = asyncio.create_task(tap.play(np.full(16000, 32767, np.int16)))
    await asyncio.sleep(0)
    called = time.monotonic()
    assert tap.level(called + 0.05) == pytest.approx(1.0, abs=1e-3)  # the call's time stands
    device.blocks = [(called + 0.08, 320)]  # the device took the first block, heard 80 ms on
    assert tap.played_between(called, called + 0.08, 16000).sum() == 0
    assert tap.played_between(called + 0.08, called + 0.1, 16000).all()
    device.go.set()
    await task


def test_a_microphone_that_does_not_hear_the_speaker_is_handed_on_untouched(voice):
    """Headphones without --headphones (or the tests' null sinks): with no echo to model,
    AEC3 took the user's voice over the reply for echo and removed it, and a barge-in was
    heard only in the reply's pauses (tests/test_talk_pulseaudio.py in CI)."""
    user = load_wav(SAMPLES / "06_learn_language.wav")
    mic = ECHO_GUARD.mix(voice, 0.0, user, 1.5)  # the user only, over the reply
    speaking = [False]  # what the segmenter would say: the user, from 1.5 s on
    canceller = EchoCanceller(ECHO_GUARD.KnownPlayback(voice),
                              user_speaking=lambda: speaking[0])
    out, heard = [], []
    for i in range(0, mic.size - BLOCK + 1, BLOCK):
        speaking[0] = 1.5 * SAMPLE_RATE <= i < 1.5 * SAMPLE_RATE + user.size
        out.append(canceller.process(MicBlock(mic[i:i + BLOCK], (i + BLOCK) / SAMPLE_RATE)
                                     ).samples)
        heard.append(canceller.echo_heard)
    told = heard.index(False)
    assert told * BLOCK / SAMPLE_RATE < 1.5  # before the user speaks: it knows
    assert not any(heard[told:])
    assert np.array_equal(np.concatenate(out[told + 1:]),
                          mic[(told + 1) * BLOCK:len(out) * BLOCK])


def test_an_echo_is_heard(voice: np.ndarray) -> None:
    canceller = EchoCanceller(ECHO_GUARD.KnownPlayback(voice))
    mic = ECHO_GUARD.mix(voice, 0.5, None, 0.0)
    for i in range(0, 2 * SAMPLE_RATE, BLOCK):
        canceller.process(MicBlock(mic[i:i + BLOCK], (i + BLOCK) / SAMPLE_RATE))
    assert canceller.echo_heard


async def test_without_an_echo_the_user_barges_in_as_with_the_guard_alone(vad, voice):
    user = load_wav(SAMPLES / "06_learn_language.wav")
    for at in (1.0, 2.0):
        mic = ECHO_GUARD.mix(voice, 0.0, user, at)
        cancelled = await ECHO_GUARD.barge_in_at(vad, mic, voice, "cancelled")
        assert cancelled is not None and cancelled - at < 1.0, (at, cancelled)


def test_blocks_changed_while_the_reply_played_carry_the_microphones_own(voice) -> None:
    """Whisper is given both versions of words said over the reply (pipeline/mic_tape.py):
    a block the canceller changed while something played carries what the microphone
    heard; after the reply (its echo's tail included) there is one version."""
    mic = np.concatenate([ECHO_GUARD.mix(voice, 0.5, None, 0.0),
                          np.zeros(2 * SAMPLE_RATE, np.float32)])
    canceller = EchoCanceller(ECHO_GUARD.KnownPlayback(voice))
    out = [canceller.process(MicBlock(mic[i:i + BLOCK], (i + BLOCK) / SAMPLE_RATE))
           for i in range(0, mic.size - BLOCK + 1, BLOCK)]
    for i, b in enumerate(out):
        heard = mic[i * BLOCK:(i + 1) * BLOCK]
        if not np.array_equal(b.samples, heard):  # changed: what was heard comes too
            assert b.uncancelled is not None, i
        if b.uncancelled is not None:
            assert np.array_equal(b.uncancelled, heard), i
    changed = sum(b.uncancelled is not None for b in out)
    assert changed * BLOCK > 0.8 * voice.size  # most of the reply
    assert all(b.uncancelled is None for b in out[-SAMPLE_RATE // BLOCK:])


@pytest.mark.parametrize("started", [True, False])
def test_a_process_that_ran_the_canceller_leaves_with_its_code(started: bool) -> None:
    import subprocess
    import sys

    start = "rtc.AudioProcessingModule(echo_cancellation=True)" if started else "pass"
    code = ("from livekit import rtc\n"
            f"{start}\n"
            "from pipeline.echo_cancel import leave_past_the_native_runtime\n"
            "print('written', end='')\n"
            "leave_past_the_native_runtime(3)\n"
            "print(' and returned', end='')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=Path(__file__).resolve().parent.parent)
    if started:  # left at once, with the code and nothing lost
        assert (done.returncode, done.stdout) == (3, "written")
    else:  # nothing native to get past: an ordinary exit
        assert (done.returncode, done.stdout) == (0, "written and returned")


@pytest.mark.parametrize("lead_s", [FAR_LEAD_S, 0.0])
def test_the_canceller_measures_how_long_after_its_far_end_the_echo_came(voice, lead_s):
    """The bench's echo comes 40 ms after the sound; handed over ``lead_s`` ahead, the far
    end leads it by that much more (what talk -v logs after each reply)."""
    mic = np.concatenate([ECHO_GUARD.mix(voice, 0.5, None, 0.0), np.zeros(SAMPLE_RATE)])
    canceller = EchoCanceller(ECHO_GUARD.KnownPlayback(voice), lead_s=lead_s)
    for i in range(0, mic.size - BLOCK + 1, BLOCK):
        canceller.process(MicBlock(mic[i:i + BLOCK].astype(np.float32), (i + BLOCK) / SAMPLE_RATE))
    expected = round((ECHO_GUARD.ECHO_DELAY_S + lead_s) * 1000)
    # two replies to it: the two questions' files leave more than ECHO_TAIL_S between them
    assert canceller.echo_delays_ms == [pytest.approx(expected, abs=10)] * 2

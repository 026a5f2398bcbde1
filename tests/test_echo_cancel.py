"""The echo canceller (pipeline/echo_cancel.py): the real WebRTC processing module on a
known echo, decided block by block on the microphone's clock (no real-time wait)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from script_module import load_script

from pipeline.audio_in import load_wav
from pipeline.bargein import EchoGuard, PlaybackTap, played_during
from pipeline.echo_cancel import ECHO_TAIL_S, EchoCanceller
from pipeline.mic import SAMPLE_RATE, MicBlock, SileroStream

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


def test_the_tap_gives_the_far_end_of_every_sentence_it_played() -> None:
    tap = PlaybackTap(None)  # type: ignore[arg-type]  # only its memory is used
    one = np.full(22050, 0.25, np.float32)
    tap._played.append((100.0, one, 22050))
    tap._played.append((101.5, one, 22050))
    far = tap.played_between(100.9, 101.6, SAMPLE_RATE)
    assert far[:int(0.09 * SAMPLE_RATE)] == pytest.approx(0.25)  # the first sentence
    assert not far[int(0.11 * SAMPLE_RATE):int(0.59 * SAMPLE_RATE)].any()  # between them
    assert far[int(0.61 * SAMPLE_RATE):] == pytest.approx(0.25)  # the second


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
    """Over a 0.5 echo the guard alone hears a user at the samples' level on few onsets
    (scripts/bench_echo_guard.py: 38 of 162); behind the canceller, every one of these,
    including the user starting with the reply, which the guard alone misses."""
    user = load_wav(SAMPLES / "06_learn_language.wav")
    starts = [0.0, 0.5, 1.0, 1.5]
    missed = [at for at in starts
              if await ECHO_GUARD.barge_in_at(vad, ECHO_GUARD.mix(voice, 0.5, user, at),
                                              voice, "cancelled") is None]
    assert not missed, f"no barge-in for the user starting at {missed} s"
    guard_alone = [at for at in starts
                   if await ECHO_GUARD.barge_in_at(vad, ECHO_GUARD.mix(voice, 0.5, user, at),
                                                   voice, "shipped") is None]
    assert guard_alone  # the same audio without the canceller


async def test_the_echo_alone_does_not_barge_in_behind_the_canceller(vad, voice):
    for echo in (0.5, 1.0):
        fired = await ECHO_GUARD.barge_in_at(vad, ECHO_GUARD.mix(voice, echo, None, 0.0),
                                             voice, "cancelled")
        assert fired is None, f"the assistant interrupted itself at {fired} s (echo {echo})"


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
    for t in (1.02, 1.06, 1.06, 1.10, 1.10, 3.0):  # pairs; then a stall of ~2 s
        canceller.process(MicBlock(silence, t))
    starts = [round(a, 3) for a, _ in far.asked]
    assert starts == [1.0, 1.02, 1.04, 1.06, 1.08, 2.98]


def test_the_tap_dates_a_sentence_from_when_the_device_played_it() -> None:
    class Device:
        sample_rate = 16000

        def __init__(self) -> None:
            self.first: float | None = None

        def heard_from(self) -> float | None:
            return self.first

        async def play(self, samples: np.ndarray) -> int:
            return samples.size

    device = Device()
    tap = PlaybackTap(device)  # type: ignore[arg-type]
    tap._played.append((5.0, np.ones(16000, np.float32), 16000))  # stamped at play()
    tap._stamped = False
    assert tap.level(5.05) == pytest.approx(1.0)  # not yet heard: the call's time stands
    device.first = 5.08  # the device took the first block; it is heard 80 ms later
    assert tap.played_between(5.0, 5.08, 16000).sum() == 0
    assert tap._played[-1][0] == 5.08


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

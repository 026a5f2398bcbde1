"""The prosody cue: pitch and energy at the end of the voice before a pause."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.prosody import SAMPLE_RATE, ProsodyCue, final_cue, pitch_track


def voice(f0_start: float, f0_end: float, seconds: float = 1.2,
          hold_until: float = 0.6) -> np.ndarray:
    """A buzzy vowel-like tone (harmonics 1-8): level at ``f0_start`` until ``hold_until``
    of the way through, then gliding to ``f0_end``."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    frac = np.clip((t / seconds - hold_until) / (1 - hold_until), 0, 1)
    f0 = f0_start * (f0_end / f0_start) ** frac
    phase = 2 * np.pi * np.cumsum(f0) / SAMPLE_RATE
    x = sum(np.sin(k * phase) / k for k in range(1, 9))
    return (0.2 * x).astype(np.float32)


def test_the_tracker_finds_the_pitch_of_a_steady_voice() -> None:
    f0, _ = pitch_track(voice(150, 150))
    voiced = f0[f0 > 0]
    assert voiced.size > 0.8 * f0.size
    assert np.median(voiced) == pytest.approx(150, rel=0.02)


@pytest.mark.parametrize("f0", [90.0, 220.0])
def test_low_and_high_voices(f0: float) -> None:
    track, _ = pitch_track(voice(f0, f0))
    assert np.median(track[track > 0]) == pytest.approx(f0, rel=0.03)


def test_a_final_fall_sounds_final() -> None:
    cue = final_cue(voice(160, 110))
    assert cue.fall_st < -2
    assert cue.sounds_final() is True


def test_a_held_pitch_does_not() -> None:
    cue = final_cue(voice(160, 158))
    assert abs(cue.fall_st) < 1
    assert cue.sounds_final() is False


def test_trailing_silence_is_not_judged() -> None:
    quiet = np.zeros(SAMPLE_RATE // 2, dtype=np.float32)
    falling = final_cue(np.concatenate([voice(160, 110), quiet]))
    assert falling.sounds_final() is True
    assert final_cue(np.concatenate([voice(160, 158), quiet])).sounds_final() is False


def test_too_little_voice_says_nothing() -> None:
    assert final_cue(np.zeros(SAMPLE_RATE, dtype=np.float32)).sounds_final() is None
    assert final_cue(voice(150, 150, seconds=0.1)).sounds_final() is None
    assert final_cue(np.zeros(10, dtype=np.float32)).voiced_frames == 0


def test_thresholds_are_the_callers() -> None:
    cue = ProsodyCue(fall_st=-1.0, slope_st_s=-20.0, decay_db=0.0, voiced_frames=50)
    assert cue.sounds_final() is False
    assert cue.sounds_final(max_fall_st=-0.5) is True
    assert cue.sounds_final(min_frames=60) is None

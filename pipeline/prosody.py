"""Prosody at a pause: does the voice sound finished? (numpy only, pure, no I/O)

Text cannot tell "Remind me to buy milk," from "Remind me to buy milk." when Whisper drops
the comma; the voice often can. A speaker who has finished lets the pitch fall to the bottom
of their range and the energy die away; a speaker who pauses mid-sentence tends to hold the
pitch level (or raise it) and stop abruptly. ``final_cue(audio)`` measures that over the last
voiced stretch before the pause:

- ``fall_st``: pitch of the last ~150 ms of voiced frames relative to the speaker's median
  over the utterance, in semitones (negative = ended low);
- ``slope_st_s``: the pitch trend over the last ~350 ms of voiced frames (semitones/s);
- ``decay_db``: energy of the last 100 ms of voice relative to the median voiced frame.

Pitch is a YIN tracker (40 ms frames, 10 ms hop, 60-400 Hz), good
enough for a trend over a few hundred ms; it is not a general-purpose F0 estimator.
``ProsodyCue.sounds_final(...)`` is the judgement the endpoint policy uses; its thresholds
were fitted on the tuning split of the endpoint corpus (docs/live.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SAMPLE_RATE = 16000
_FRAME = 640  # 40 ms: at least two periods at 60 Hz
_HOP = 160  # 10 ms
_MIN_LAG, _MAX_LAG = SAMPLE_RATE // 400, SAMPLE_RATE // 60
_YIN_THRESHOLD = 0.2  # normalised difference under which a lag is a period
_FINAL_MS, _TREND_MS, _DECAY_MS = 150, 350, 100
_CONTEXT_S = 4.0
_DIP_LAGS = 12  # how far past the threshold crossing the dip's bottom is looked for


@dataclass(frozen=True)
class ProsodyCue:
    fall_st: float  # final pitch vs the utterance median, semitones
    slope_st_s: float  # pitch trend over the final stretch, semitones per second
    decay_db: float  # final energy vs the median voiced frame, dB
    voiced_frames: int  # how much pitch there was to judge

    def sounds_final(self, max_fall_st: float = -2.0, min_frames: int = 20) -> bool | None:
        """True: the voice ended low, ``max_fall_st`` or more under the speaker's median
        (a finished statement); False: it ended level or high (a speaker holding the turn,
        or a rising question); None: too little voice to tell. The slope is recorded but
        not judged: over ~350 ms it swings with the last syllable's own contour."""
        if self.voiced_frames < min_frames:
            return None
        return self.fall_st <= max_fall_st


def pitch_track(audio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(f0 Hz per 10 ms frame, 0 where unvoiced; rms per frame) of 16 kHz float32 audio.

    YIN (de Cheveigné & Kawahara 2002): the cumulative-mean-normalised difference function,
    the first lag under ``_YIN_THRESHOLD`` (a period's multiples dip as low as the period
    itself, so the *first* dip avoids octave errors), refined by parabolic interpolation."""
    x = np.asarray(audio, dtype=np.float64).ravel()
    if x.size < _FRAME:
        return np.zeros(0), np.zeros(0)
    n = 1 + (x.size - _FRAME) // _HOP
    idx = np.arange(_FRAME)[None, :] + _HOP * np.arange(n)[:, None]
    frames = x[idx]
    frames = frames - frames.mean(axis=1, keepdims=True)
    rms = np.sqrt(np.mean(frames ** 2, axis=1))
    width = _FRAME - _MAX_LAG - 1  # the compared stretch: at least one 60 Hz period
    nfft = 2 * _FRAME
    head = np.fft.rfft(frames[:, :width], n=nfft, axis=1)
    whole = np.fft.rfft(frames, n=nfft, axis=1)
    r = np.fft.irfft(np.conj(head) * whole, n=nfft, axis=1)[:, :_MAX_LAG + 1]
    sq = np.concatenate([np.zeros((n, 1)), np.cumsum(frames ** 2, axis=1)], axis=1)
    lags = np.arange(_MAX_LAG + 1)
    e_lag = sq[:, lags + width] - sq[:, lags]
    diff = np.maximum(e_lag[:, :1] + e_lag - 2 * r, 0.0)
    cum = np.cumsum(diff[:, 1:], axis=1)
    cmnd = np.ones_like(diff)
    cmnd[:, 1:] = diff[:, 1:] * lags[1:] / np.maximum(cum, 1e-12)
    seg = cmnd[:, _MIN_LAG:]
    below = seg < _YIN_THRESHOLD
    loud = rms > max(1e-4, 0.05 * float(np.max(rms)))
    voiced = loud & below.any(axis=1)
    # The bottom of the first dip: the minimum within a few lags after it goes under.
    first = np.argmax(below, axis=1)
    span = np.minimum(first[:, None] + np.arange(_DIP_LAGS)[None, :], seg.shape[1] - 1)
    rows = np.arange(n)[:, None]
    j = span[np.arange(n), np.argmin(seg[rows, span], axis=1)]
    inner = (j > 0) & (j < seg.shape[1] - 1)
    jj = np.clip(j, 1, seg.shape[1] - 2)
    a, b, c = seg[np.arange(n), jj - 1], seg[np.arange(n), jj], seg[np.arange(n), jj + 1]
    denom = a - 2 * b + c
    ok = inner & (np.abs(denom) > 1e-12)
    shift = np.where(ok, 0.5 * (a - c) / np.where(ok, denom, 1.0), 0.0)
    f0 = np.where(voiced, SAMPLE_RATE / (j + _MIN_LAG + shift), 0.0)
    return f0, rms


def final_cue(audio: np.ndarray) -> ProsodyCue:
    """The cue over the end of ``audio`` (the utterance up to the pause; trailing silence is
    skipped: the last voiced frame is found from the pitch track). Only the last
    ``_CONTEXT_S`` are tracked: enough for the speaker's median, bounded work per pause."""
    f0, rms = pitch_track(np.asarray(audio)[-int(_CONTEXT_S * SAMPLE_RATE):])
    voiced = np.flatnonzero(f0 > 0)
    if voiced.size == 0:
        return ProsodyCue(0.0, 0.0, 0.0, 0)
    st = 12 * np.log2(f0[voiced] / np.median(f0[voiced]))
    t_ms = voiced * 1000 * _HOP / SAMPLE_RATE
    end = t_ms[-1]
    final = st[t_ms >= end - _FINAL_MS]
    trend = t_ms >= end - _TREND_MS
    slope = 0.0
    if np.count_nonzero(trend) >= 5 and np.ptp(t_ms[trend]) > 0:
        slope = float(np.polyfit(t_ms[trend] / 1000, st[trend], 1)[0])
    last = voiced[-1]
    tail = rms[max(0, last - _DECAY_MS * SAMPLE_RATE // 1000 // _HOP):last + 1]
    ref = float(np.median(rms[voiced]))
    decay = 20 * np.log10(max(float(np.mean(tail)), 1e-9) / max(ref, 1e-9))
    return ProsodyCue(float(np.median(final)), slope, decay, int(voiced.size))

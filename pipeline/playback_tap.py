"""What the speaker played, and when: the echo guard's playback level and the echo
canceller's far end.

A sentence is not heard as one stretch from the moment it was handed over. The device
takes it block by block; under load (Piper and llama-server on the same two cores) the
output can run dry for a while, and the rest of the sentence is heard later by as much.
A far end dated only from the sentence's first sample is then shifted against its echo
for the rest of the sentence. WebRTC's AEC3 lets the echo through until it has found
the delay again: shifting the far end of a recorded open-speaker run by 60-120 ms made
the assistant interrupt itself in 5 of 18 offline replays (30 ms: none). So every played
sentence carries a ``Schedule``: when each block the device took reached the speaker
(``SoundDeviceSink.heard_blocks``), with silence wherever the device played none of it.
(The microphone's side of the same clock is ``EchoCanceller._span``.)
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from pipeline.audio_out import AudioSink

log = logging.getLogger(__name__)

# A later block heard this much after the previous one ended: the output ran dry between
# them (PortAudio's DAC times are exact to well under a millisecond).
UNDERRUN_S = 0.002


@runtime_checkable
class HeardClock(Protocol):
    """A sink that knows when each block of its current ``play`` reached the speaker
    (``SoundDeviceSink``)."""

    def heard_blocks(self) -> list[tuple[float, int]]:
        """(moment its first sample was heard, samples) of every block handed over so far
        in the current (or last) ``play``, in order; empty until the device took one."""
        ...


class Schedule:
    """When each stretch of a sentence's samples was heard: blocks of ``counts[k]``
    samples, back to back in the audio, the k-th heard from ``starts[k]`` (seconds).
    Between one block's end and the next start the speaker played nothing of it."""

    def __init__(self, blocks: Sequence[tuple[float, int]], rate: int) -> None:
        self.rate = rate
        self.starts = np.array([at for at, _ in blocks], dtype=np.float64)
        self.counts = np.array([n for _, n in blocks], dtype=np.int64)
        self.offsets = np.cumsum(self.counts) - self.counts

    @classmethod
    def from_start(cls, start: float, samples: int, rate: int) -> Schedule:
        """All of it, in one go from ``start`` (before the device has said when)."""
        return cls([(start, samples)], rate)

    def heard_by(self, t: float) -> int:
        """How many samples had been heard by ``t``."""
        k = int(np.searchsorted(self.starts, t, side="right")) - 1
        if k < 0:
            return 0
        into = int((t - self.starts[k]) * self.rate)
        return int(self.offsets[k] + min(int(self.counts[k]), max(0, into)))

    def positions(self, times: np.ndarray) -> np.ndarray:
        """The (fractional) sample heard at each of ``times``; -1 where none was."""
        k = np.searchsorted(self.starts, times, side="right") - 1
        pos = np.full(times.shape, -1.0)
        inside = k >= 0
        kk = k[inside]
        into = (times[inside] - self.starts[kk]) * self.rate
        heard = into < self.counts[kk]
        pos[np.flatnonzero(inside)[heard]] = self.offsets[kk][heard] + into[heard]
        return pos

    def gaps_s(self) -> float:
        """Seconds of silence between the blocks (the output ran dry)."""
        if self.starts.size < 2:
            return 0.0
        ends = self.starts[:-1] + self.counts[:-1] / self.rate
        return float(np.clip(self.starts[1:] - ends, 0.0, None).sum())


def loudest_rms(audio: np.ndarray, rate: int) -> float:
    """The loudest 20 ms RMS of ``audio`` (float scale), 0.0 when shorter than 20 ms."""
    block = max(1, rate // 50)
    n = audio.size // block
    if not n:
        return 0.0
    frames = audio[:n * block].reshape(n, block)
    return float(np.sqrt(np.mean(np.square(frames), axis=1)).max())


def _schedule(start: float | Schedule, audio: np.ndarray, rate: int) -> Schedule:
    return start if isinstance(start, Schedule) else Schedule.from_start(start, audio.size,
                                                                          rate)


def level_before(audio: np.ndarray, rate: int, start: float | Schedule, t: float,
                 span_s: float) -> float:
    """``loudest_rms`` of what ``audio``, played from ``start`` (or on a ``Schedule``),
    sent out in the ``span_s`` before ``t`` (0.0 once it is over by more than the span)."""
    when = _schedule(start, audio, rate)
    a, b = when.heard_by(t - span_s), min(audio.size, when.heard_by(t))
    return loudest_rms(audio[a:b], rate) if b > a else 0.0


def played_during(audio: np.ndarray, rate: int, start: float | Schedule, t0: float,
                  t1: float, out_rate: int) -> np.ndarray:
    """What ``audio``, played from ``start`` (or on a ``Schedule``) at ``rate``, sent out
    between ``t0`` and ``t1``, at ``out_rate`` (linear interpolation; zeros outside it and
    in the schedule's gaps): the echo canceller's far end (``pipeline.echo_cancel``)."""
    n = max(0, round((t1 - t0) * out_rate))
    pos = _schedule(start, audio, rate).positions(t0 + np.arange(n) / out_rate)
    out = np.zeros(n, dtype=np.float32)
    inside = (pos >= 0) & (pos < audio.size - 1)
    if inside.any():
        p = pos[inside]
        i = p.astype(np.int64)
        frac = (p - i).astype(np.float32)
        out[inside] = audio[i] * (1 - frac) + audio[i + 1] * frac
    return out


class PlaybackTap:
    """A sink wrapper that remembers what it played and when, for the echo guard and the
    echo canceller.

    ``level(t)`` is the loudest 20 ms RMS (float scale, 1.0 = full scale) the speaker
    produced in the ``span_s`` before ``t``: the span covers output + input latency and a
    room's reverberation, so the echo of a loud syllable is still matched a bit later.
    """

    def __init__(self, inner: AudioSink, span_s: float = 0.3) -> None:
        self.inner = inner
        self.span_s = span_s
        # (schedule, samples as float, rate) of the last few sentences
        self._played: deque[tuple[Schedule, np.ndarray, int]] = deque(maxlen=4)
        self._settled = True  # the newest entry's schedule is final (its play() returned)
        self._blocks_seen = 0  # of the newest entry's, by the schedule it has
        self.underrun_s = 0.0  # silence the output inserted into sentences, in all

    @property
    def sample_rate(self) -> int:
        return self.inner.sample_rate

    async def open(self, sample_rate: int) -> None:
        await self.inner.open(sample_rate)

    async def play(self, samples: np.ndarray) -> int:
        audio, rate = samples.astype(np.float32) / 32768.0, self.sample_rate
        self._played.append((Schedule.from_start(time.monotonic(), audio.size, rate), audio,
                             rate))
        self._settled, self._blocks_seen = False, 0
        played = await self.inner.play(samples)
        self._restamp()
        self._settled = True
        when, audio, rate = self._played[-1]
        if played < samples.size:  # stopped: the rest was never heard
            self._played[-1] = (when, audio[:played], rate)
        gaps = when.gaps_s()
        if gaps > UNDERRUN_S:
            self.underrun_s += gaps
            log.info("output ran dry for %.0f ms in a sentence (the echo canceller's far "
                     "end follows it)", gaps * 1000)
        return played

    def _restamp(self) -> None:
        """Date the playing entry by when the device really played each block
        (``HeardClock``), not from the ``play()`` call: the first block is heard 40-110 ms
        after it through PulseAudio, by a different amount for every sentence, and an
        output that runs dry delays the rest (the module's docstring)."""
        if self._settled or not self._played or not isinstance(self.inner, HeardClock):
            return
        blocks = self.inner.heard_blocks()
        if blocks and len(blocks) != self._blocks_seen:  # when the device took another
            self._blocks_seen = len(blocks)
            when, audio, rate = self._played[-1]
            heard = sum(n for _, n in blocks)
            if heard < audio.size:  # the rest, as if it follows on (it is not heard yet)
                end = blocks[-1][0] + blocks[-1][1] / rate
                blocks = [*blocks, (end, audio.size - heard)]
            self._played[-1] = (Schedule(blocks, rate), audio, rate)

    def level(self, t: float) -> float:
        self._restamp()
        return max((level_before(audio, rate, when, t, self.span_s)
                    for when, audio, rate in self._played), default=0.0)

    def played_between(self, t0: float, t1: float, rate: int) -> np.ndarray:
        """What was played between ``t0`` and ``t1`` at ``rate`` (zeros where nothing
        was): the far end of ``pipeline.echo_cancel``."""
        self._restamp()
        out = np.zeros(max(0, round((t1 - t0) * rate)), dtype=np.float32)
        for when, audio, played_rate in self._played:
            part = played_during(audio, played_rate, when, t0, t1, rate)
            out[:part.size] += part
        return out

    def stop(self) -> None:
        self.inner.stop()

    def resume(self) -> None:
        self.inner.resume()

    async def close(self) -> None:
        await self.inner.close()

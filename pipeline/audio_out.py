"""Audio output: the one sink contract, and the sinks that need no sound card.

Every sink honours ``AudioSink``, which the turn runner and barge-in rely on:

* ``play(samples)`` returns when the samples have been played (at real-time pace, except
  for ``InstantSink`` and a bare ``WavFileSink``), or early after ``stop()``; it returns the
  exact number of samples played, so the history can be cut at what the user actually heard.
* ``stop()`` (barge-in) makes the current ``play`` return within one block (<= 20 ms) and
  every further ``play`` return 0 at once, until ``resume()``.

Sinks are driven from the event loop thread; ``stop()`` is a plain method so the barge-in
task can call it without awaiting anything. The sound card is ``pipeline.speaker``; the
browser's speaker ``services.ws_sink``.
"""

from __future__ import annotations

import asyncio
import logging
import wave
from pathlib import Path
from typing import Protocol

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_BLOCK_MS = 20


class AudioSink(Protocol):
    """Plays int16 mono samples at ``sample_rate`` (0 until ``open``)."""

    @property
    def sample_rate(self) -> int: ...

    async def open(self, sample_rate: int) -> None: ...

    async def play(self, samples: np.ndarray) -> int: ...

    def stop(self) -> None: ...

    def resume(self) -> None: ...

    async def close(self) -> None: ...


def as_int16(samples: np.ndarray) -> np.ndarray:
    """Flat int16 view of ``samples``; float audio here is a programming error, not data."""
    if samples.dtype != np.int16:
        raise TypeError(f"audio sinks play int16 samples, got {samples.dtype}")
    return samples.reshape(-1)


def block_samples(sample_rate: int, block_ms: int) -> int:
    return max(1, sample_rate * block_ms // 1000)


class ScheduledSink:
    """A real-time sink paced on the event-loop clock against an absolute schedule.

    Each block is handed to ``_deliver`` ``lead_s`` before its play time (0 for a sink
    that plays nothing; a network player's jitter buffer otherwise); ``play`` returns when
    the last sample's play time has passed, and after ``stop()`` it returns at once with
    what the schedule had played by then. Back-to-back ``play`` calls continue the same
    schedule (as a device buffer would), so a long reply does not drift, unless there was
    a real gap. Subclasses override ``_deliver`` (and may add to ``open``/``stop``).
    """

    def __init__(self, block_ms: int = DEFAULT_BLOCK_MS, lead_s: float = 0.0) -> None:
        self.block_ms = block_ms
        self.lead_s = lead_s
        self.sample_rate = 0
        self._stopped = False
        self._wake: asyncio.Future[float] | None = None  # resolved by stop() with its time
        self._schedule_end: float | None = None  # loop time when the last sample plays
        self._closed = False

    async def open(self, sample_rate: int) -> None:
        if self._closed:  # like a device: reopened after close() it plays again
            self._stopped = self._closed = False
        self.sample_rate = sample_rate
        self._schedule_end = None

    def _deliver(self, block: np.ndarray) -> None:
        """Hand one block over ``lead_s`` before its play time; nothing to do here."""

    def _can_play(self) -> bool:
        return not self._stopped

    async def play(self, samples: np.ndarray) -> int:
        samples = as_int16(samples)
        _require_open(self, type(self).__name__)
        if samples.size == 0 or not self._can_play():
            return 0
        loop = asyncio.get_running_loop()
        start = self._schedule_start(loop.time())
        wake: asyncio.Future[float] = loop.create_future()
        self._wake = wake
        try:
            played = await self._pace(loop, wake, start, samples)
        finally:
            self._wake = None
        self._schedule_end = None if wake.done() else start + played / self.sample_rate
        return played

    async def _pace(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Future[float],
                    start: float, samples: np.ndarray) -> int:
        block = block_samples(self.sample_rate, self.block_ms)
        for offset in range(0, samples.size, block):
            if await _sleep_until(loop, wake, start + offset / self.sample_rate - self.lead_s):
                return self._played_at(wake.result(), start, samples.size)
            self._deliver(samples[offset:offset + block])
        if await _sleep_until(loop, wake, start + samples.size / self.sample_rate):
            return self._played_at(wake.result(), start, samples.size)
        return samples.size

    def _played_at(self, stopped_at: float, start: float, total: int) -> int:
        # Count what the schedule had played when stop() was called.
        return min(total, max(0, int((stopped_at - start) * self.sample_rate)))

    def _schedule_start(self, now: float) -> float:
        # Late by less than a block: the previous sound is still "in the buffer", so keep
        # the absolute schedule (no drift). Later than that, the buffer ran dry: start
        # again, one lead ahead.
        block_s = self.block_ms / 1000
        if self._schedule_end is not None and now - self._schedule_end < block_s:
            return self._schedule_end
        return now + self.lead_s

    def stop(self) -> None:
        self._halt()

    def _halt(self) -> None:
        self._stopped = True
        self._schedule_end = None
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(wake.get_loop().time())

    def resume(self) -> None:
        self._stopped = False

    async def close(self) -> None:
        self._halt()  # a play() still running returns now
        self._closed = True


class RealtimeNullSink(ScheduledSink):
    """Plays nothing, at exactly the speed a sound card would.

    Blocks are consumed against an absolute schedule on the event-loop clock, so a long
    reply does not drift, and back-to-back ``play`` calls continue the same schedule (as a
    device buffer would) unless there was a real gap. Replay and compare use it so turn
    timing includes playback time and a scripted barge-in lands mid-sentence.
    """

    def __init__(self, block_ms: int = DEFAULT_BLOCK_MS) -> None:
        super().__init__(block_ms, lead_s=0.0)


class InstantSink:
    """Machines do not listen: audio counts as played the moment it is ready (POST
    /api/turn). ``samples`` counts everything played."""

    def __init__(self) -> None:
        self.sample_rate = 0
        self.samples = 0
        self._stopped = False

    async def open(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate

    async def play(self, samples: np.ndarray) -> int:
        if self._stopped:
            return 0
        self.samples += samples.size
        return int(samples.size)

    def stop(self) -> None:
        self._stopped = True

    def resume(self) -> None:
        self._stopped = False

    async def close(self) -> None:
        """Nothing to release."""


class WavFileSink:
    """Records everything played into a 16-bit mono WAV, written at ``close()``.

    With an ``inner`` sink (e.g. ``RealtimeNullSink()`` or the sound card's
    ``SoundDeviceSink``) pacing and stop semantics are the inner one's and only the samples
    it actually played are written; without one, ``play`` is instant.
    """

    def __init__(self, path: str | Path, inner: AudioSink | None = None) -> None:
        self.path = Path(path)
        self.inner = inner
        self.sample_rate = 0
        self._stopped = False
        self._chunks: list[np.ndarray] = []

    async def open(self, sample_rate: int) -> None:
        if self._chunks and sample_rate != self.sample_rate:
            raise ValueError(f"{self.path}: already recording at {self.sample_rate} Hz, "
                             f"cannot switch to {sample_rate} Hz")
        self.sample_rate = sample_rate
        if self.inner is not None:
            await self.inner.open(sample_rate)

    async def play(self, samples: np.ndarray) -> int:
        samples = as_int16(samples)
        _require_open(self, "WavFileSink")
        if self.inner is not None:
            played = await self.inner.play(samples)
        else:
            played = 0 if self._stopped else samples.size
        if played:
            self._chunks.append(samples[:played].copy())
        return played

    @property
    def recorded(self) -> np.ndarray:
        """Everything played so far, as one int16 array."""
        if not self._chunks:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(self._chunks)

    def stop(self) -> None:
        self._stopped = True
        if self.inner is not None:
            self.inner.stop()

    def resume(self) -> None:
        self._stopped = False
        if self.inner is not None:
            self.inner.resume()

    async def close(self) -> None:
        try:
            if self.inner is not None:
                await self.inner.close()
        finally:
            await asyncio.to_thread(self._write)

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with wave.open(str(self.path), "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(self.sample_rate or 16000)  # never opened: still a valid WAV
            w.writeframes(self.recorded.astype("<i2").tobytes())
        log.info("wrote %s (%.2f s)", self.path,
                 self.recorded.size / self.sample_rate if self.sample_rate else 0.0)


async def _sleep_until(loop: asyncio.AbstractEventLoop, wake: asyncio.Future[float],
                       deadline: float) -> bool:
    """Wait for ``deadline`` (loop time); True when ``stop()`` came first."""
    delay = deadline - loop.time()
    if delay > 0 and not wake.done():
        await asyncio.wait({wake}, timeout=delay)
    return wake.done()


def _require_open(sink: ScheduledSink | WavFileSink, name: str) -> None:
    if sink.sample_rate <= 0:
        raise RuntimeError(f"{name}.play() before open()")

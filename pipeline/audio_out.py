"""Audio output: sinks that play int16 mono samples at a sample rate.

Every sink honours the same contract, which the turn runner and barge-in rely on:

* ``play(samples)`` returns when the samples have been played (at real-time pace, except
  for a bare ``WavFileSink``), or early after ``stop()``; it returns the exact number of
  samples played, so the history can be cut at what the user actually heard.
* ``stop()`` (barge-in) makes the current ``play`` return within one block (<= 20 ms) and
  every further ``play`` return 0 at once, until ``resume()``.

Sinks are driven from the event loop thread; ``stop()`` is a plain method so the barge-in
task can call it without awaiting anything.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import wave
from pathlib import Path
from typing import Any, Protocol

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_BLOCK_MS = 20


class AudioDeviceError(Exception):
    """The sound system cannot be used; ``str(e)`` is one line saying how to fix it."""


class AudioSink(Protocol):
    sample_rate: int

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


class RealtimeNullSink:
    """Plays nothing, at exactly the speed a sound card would.

    Blocks are consumed against an absolute schedule on the event-loop clock, so a long
    reply does not drift, and back-to-back ``play`` calls continue the same schedule (as a
    device buffer would) unless there was a real gap. Replay and compare use it so turn
    timing includes playback time and a scripted barge-in lands mid-sentence.
    """

    def __init__(self, block_ms: int = DEFAULT_BLOCK_MS) -> None:
        self.block_ms = block_ms
        self.sample_rate = 0
        self._stopped = False
        self._wake: asyncio.Future[float] | None = None  # resolved by stop() with its time
        self._schedule_end: float | None = None  # loop time when the last sample ends

    async def open(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self._schedule_end = None

    async def play(self, samples: np.ndarray) -> int:
        samples = as_int16(samples)
        _require_open(self, "RealtimeNullSink")
        if self._stopped or samples.size == 0:
            return 0
        loop = asyncio.get_running_loop()
        start = self._schedule_start(loop.time())
        wake: asyncio.Future[float] = loop.create_future()
        self._wake = wake
        try:
            played = await self._pace(loop, wake, start, samples.size)
        finally:
            self._wake = None
        self._schedule_end = None if wake.done() else start + played / self.sample_rate
        return played

    async def _pace(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Future[float],
                    start: float, total: int) -> int:
        block = block_samples(self.sample_rate, self.block_ms)
        for end in range(block, total + block, block):
            deadline = start + min(end, total) / self.sample_rate
            delay = deadline - loop.time()
            if delay > 0:
                await asyncio.wait({wake}, timeout=delay)
            if wake.done():
                # Count what the schedule had played when stop() was called.
                elapsed = wake.result() - start
                return min(total, max(0, int(elapsed * self.sample_rate)))
        return total

    def _schedule_start(self, now: float) -> float:
        # Late by less than a block: the previous sound is still "in the buffer", so keep
        # the absolute schedule (no drift). Later than that, the device ran dry: restart.
        block_s = self.block_ms / 1000
        if self._schedule_end is not None and now - self._schedule_end < block_s:
            return self._schedule_end
        return now

    def stop(self) -> None:
        self._stopped = True
        self._schedule_end = None
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(wake.get_loop().time())

    def resume(self) -> None:
        self._stopped = False

    async def close(self) -> None:
        self.stop()


class WavFileSink:
    """Records everything played into a 16-bit mono WAV, written at ``close()``.

    With an ``inner`` sink (e.g. ``RealtimeNullSink()`` or a ``SoundDeviceSink``) pacing and
    stop semantics are the inner one's and only the samples it actually played are written;
    without one, ``play`` is instant.
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


class SoundDeviceSink:
    """The sound card, through a sounddevice (PortAudio) ``OutputStream`` callback.

    The stream runs for the sink's whole life and plays silence when idle, so sentences
    follow each other without start-up glitches. The PortAudio callback copies one block
    at a time from the current ``play`` buffer; ``stop()`` empties that buffer, so the next
    callback (<= one block later) outputs silence. The count ``play`` returns is the number
    of samples handed to the device; the device's own output latency (a few ms with
    ``latency="low"``) is the only part of it the user may not have heard yet.
    """

    def __init__(self, device: str | int | None = None,
                 block_ms: int = DEFAULT_BLOCK_MS) -> None:
        self.device = device
        self.block_ms = block_ms
        self.sample_rate = 0
        self._stream: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # the callback runs on PortAudio's thread
        self._buf: np.ndarray | None = None
        self._pos = 0
        self._done: asyncio.Future[int] | None = None
        self._stopped = False

    async def open(self, sample_rate: int) -> None:
        if self._stream is not None and sample_rate == self.sample_rate:
            return
        await self.close()
        sd = import_sounddevice()
        self._loop = asyncio.get_running_loop()
        self.sample_rate = sample_rate
        self._stream = await asyncio.to_thread(self._start_stream, sd, sample_rate)

    def _start_stream(self, sd: Any, sample_rate: int) -> Any:
        try:
            stream = sd.OutputStream(samplerate=sample_rate, channels=1, dtype="int16",
                                     device=self.device, latency="low",
                                     blocksize=block_samples(sample_rate, self.block_ms),
                                     callback=self._callback)
            stream.start()
        except (sd.PortAudioError, ValueError) as e:
            name = "default" if self.device is None else repr(self.device)
            raise AudioDeviceError(f"cannot open output device {name}: {e}") from None
        log.info("output device %s open at %d Hz, latency %.0f ms", self.device or "default",
                 sample_rate, stream.latency * 1000)
        return stream

    def _callback(self, outdata: np.ndarray, frames: int, _time: Any, status: Any) -> None:
        if status:
            log.debug("output stream status: %s", status)
        with self._lock:
            buf = self._buf
            if buf is None:
                outdata.fill(0)
                return
            n = min(frames, buf.size - self._pos)
            outdata[:n, 0] = buf[self._pos:self._pos + n]
            outdata[n:].fill(0)
            self._pos += n
            if self._pos >= buf.size:
                self._buf = None
                self._resolve(self._done, self._pos)

    def _resolve(self, fut: asyncio.Future[int] | None, count: int) -> None:
        # Called from PortAudio's thread or the loop's: hand over to the loop either way.
        if fut is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(_set_if_pending, fut, count)

    async def play(self, samples: np.ndarray) -> int:
        samples = as_int16(samples)
        if self._stream is None:
            raise RuntimeError("SoundDeviceSink.play() before open()")
        if self._stopped or samples.size == 0:
            return 0
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._buf, self._pos, self._done = samples, 0, fut
        # A device that stops pulling audio must not hang the turn.
        limit = samples.size / self.sample_rate + 2.0
        try:
            return await asyncio.wait_for(fut, timeout=limit)
        except TimeoutError:
            raise AudioDeviceError("output device stopped consuming audio") from None
        finally:
            with self._lock:
                if self._done is fut:
                    self._buf, self._done = None, None

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._buf = None
            fut, played = self._done, self._pos
        self._resolve(fut, played)

    def resume(self) -> None:
        self._stopped = False

    async def close(self) -> None:
        self.stop()
        stream, self._stream = self._stream, None
        if stream is not None:
            await asyncio.to_thread(_close_stream, stream)


def import_sounddevice() -> Any:
    """Import sounddevice lazily; a missing PortAudio becomes one actionable line."""
    try:
        import sounddevice
    except OSError:
        raise AudioDeviceError("PortAudio not found: apt-get install libportaudio2") from None
    return sounddevice


def _close_stream(stream: Any) -> None:
    stream.stop()
    stream.close()


def _set_if_pending(fut: asyncio.Future[int], count: int) -> None:
    if not fut.done():
        fut.set_result(count)


def _require_open(sink: RealtimeNullSink | WavFileSink, name: str) -> None:
    if sink.sample_rate <= 0:
        raise RuntimeError(f"{name}.play() before open()")

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
import time
import wave
from pathlib import Path
from typing import Any, Protocol

import numpy as np

log = logging.getLogger(__name__)

DEFAULT_BLOCK_MS = 20
_START_TIMEOUT_S = 5.0


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

    The stream runs for the sink's whole life and plays silence when idle. The PortAudio
    callback copies one block at a time from the current ``play`` buffer and notes when
    that block will reach the speaker (PortAudio's DAC time), so:

    * ``play`` returns when the last sample has actually been heard, not when it was handed
      to the device: consecutive sentences are separated by the device latency (tens of ms
      with ``latency="low"``);
    * after ``stop()`` the count is the samples heard by then, exact to the DAC clock, and
      the blocks already queued in the device are discarded (``abort`` + restart on a
      helper thread) so silence does not wait for the device buffer to drain.
    """

    def __init__(self, device: str | int | None = None, block_ms: int = DEFAULT_BLOCK_MS,
                 *, latency: str | float = "low") -> None:
        self.device = device
        self.block_ms = block_ms
        self.latency = latency
        self.sample_rate = 0
        self._stream: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # shared with the callback on PortAudio's thread
        self._buf: np.ndarray | None = None
        self._pos = 0
        self._consumed: asyncio.Future[float] | None = None  # -> time the end is heard
        self._blocks: list[tuple[float, int]] = []  # (time heard, samples) of this play
        self._wake: asyncio.Future[float] | None = None  # -> time of stop()
        self._stopped = False
        self._flusher: threading.Thread | None = None
        self._device_end = 0.0  # when the last block handed to the device will be heard
        self._last_callback = 0.0
        self._pulling = threading.Event()  # the device consumes blocks at real-time pace

    async def open(self, sample_rate: int) -> None:
        if self._stream is not None and sample_rate == self.sample_rate:
            return
        await self.close()
        self._stopped = False  # close() stops; a freshly opened device plays
        sd = import_sounddevice()
        self._loop = asyncio.get_running_loop()
        self.sample_rate = sample_rate
        self._stream = await asyncio.to_thread(self._start_stream, sd, sample_rate)
        # PortAudio pre-fills a few blocks at once, then some devices stall before pulling
        # (~0.3-2 s into a PulseAudio null sink here). Being open means being ready to play
        # in real time, so wait for steady pulling; a device that never gets there shows up
        # in play()'s timeout.
        if not await asyncio.to_thread(self._pulling.wait, _START_TIMEOUT_S):
            log.warning("output device %s not pulling audio after %.0f s",
                        self.device or "default", _START_TIMEOUT_S)

    def _start_stream(self, sd: Any, sample_rate: int) -> Any:
        try:
            stream = sd.OutputStream(samplerate=sample_rate, channels=1, dtype="int16",
                                     device=self.device, latency=self.latency,
                                     blocksize=block_samples(sample_rate, self.block_ms),
                                     callback=self._callback)
            stream.start()
        except (sd.PortAudioError, ValueError) as e:
            name = "default" if self.device is None else repr(self.device)
            raise AudioDeviceError(f"cannot open output device {name}: {e}") from None
        log.info("output device %s open at %d Hz, latency %.0f ms", self.device or "default",
                 sample_rate, stream.latency * 1000)
        return stream

    def _callback(self, outdata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        if status:
            log.debug("output stream status: %s", status)
        now = time.monotonic()
        if now - self._last_callback > 0.5 * self.block_ms / 1000 and self._last_callback:
            self._pulling.set()
        self._last_callback = now
        with self._lock:
            # After a start-up stall or an underrun, PortAudio pulls several blocks at once;
            # they still reach the speaker one after the other, never overlapping.
            heard_at = max(now + self._ahead(time_info), self._device_end)
            self._device_end = heard_at + frames / self.sample_rate
            buf = self._buf
            if buf is None:
                outdata.fill(0)
                return
            n = min(frames, buf.size - self._pos)
            outdata[:n, 0] = buf[self._pos:self._pos + n]
            outdata[n:].fill(0)
            self._pos += n
            self._blocks.append((heard_at, n))
            if self._pos >= buf.size:
                self._buf = None
                self._post(self._consumed, heard_at + n / self.sample_rate)

    def _ahead(self, time_info: Any) -> float:
        """Seconds until this block reaches the speaker; some host APIs report 0."""
        ahead = float(time_info.outputBufferDacTime - time_info.currentTime)
        if 0 < ahead < 1 or self._stream is None:
            return max(0.0, ahead)
        return float(self._stream.latency)

    def _post(self, fut: asyncio.Future[float] | None, value: float) -> None:
        # From PortAudio's thread or the loop's: hand over to the loop either way.
        if fut is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(_set_if_pending, fut, value)

    async def play(self, samples: np.ndarray) -> int:
        samples = as_int16(samples)
        if self._stream is None:
            raise RuntimeError("SoundDeviceSink.play() before open()")
        if self._stopped or samples.size == 0:
            return 0
        loop = asyncio.get_running_loop()
        consumed: asyncio.Future[float] = loop.create_future()
        wake: asyncio.Future[float] = loop.create_future()
        with self._lock:
            self._buf, self._pos, self._consumed, self._blocks = samples, 0, consumed, []
        self._wake = wake
        try:
            return await self._until_heard(samples.size, consumed, wake)
        finally:
            self._wake = None
            with self._lock:
                if self._consumed is consumed:
                    self._buf, self._consumed = None, None

    async def _until_heard(self, total: int, consumed: asyncio.Future[float],
                           wake: asyncio.Future[float]) -> int:
        # A device that stops pulling audio must not hang the turn.
        limit = total / self.sample_rate + 5.0
        await asyncio.wait({consumed, wake}, timeout=limit,
                           return_when=asyncio.FIRST_COMPLETED)
        if not (consumed.done() or wake.done()):
            raise AudioDeviceError("output device stopped consuming audio")
        if not wake.done():
            delay = consumed.result() - time.monotonic()
            if delay > 0:
                await asyncio.wait({wake}, timeout=delay)
        return self._heard_by(wake.result()) if wake.done() else total

    def _heard_by(self, moment: float) -> int:
        with self._lock:
            blocks = list(self._blocks)
        return sum(min(n, max(0, int((moment - at) * self.sample_rate))) for at, n in blocks)

    def stop(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._stopped = True
            self._buf = None
            in_flight = any(at + n / self.sample_rate > now for at, n in self._blocks)
        wake = self._wake
        if wake is not None:
            self._post(wake, now)
        if in_flight:
            self._flush_device()

    def _flush_device(self) -> None:
        """Drop the blocks queued in the device now (PortAudio abort), then restart."""
        stream = self._stream
        if stream is None or (self._flusher is not None and self._flusher.is_alive()):
            return
        self._flusher = threading.Thread(target=self._abort_and_restart, args=(stream,),
                                         name="audio-out-flush", daemon=True)
        self._flusher.start()

    def _abort_and_restart(self, stream: Any) -> None:
        # The restart may take a while before the device pulls again (~2 s into a
        # PulseAudio null sink here); it overlaps the user's next utterance, so the next
        # reply does not wait for it.
        try:
            stream.abort()
            with self._lock:
                self._device_end = 0.0  # the queued blocks were discarded
            stream.start()
        except Exception:  # a dead device shows up in play()'s timeout; keep the reason
            log.exception("output device flush failed")

    def resume(self) -> None:
        self._stopped = False

    async def close(self) -> None:
        self.stop()
        stream, self._stream = self._stream, None
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            await asyncio.to_thread(flusher.join)
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


def _set_if_pending(fut: asyncio.Future[float], value: float) -> None:
    if not fut.done():
        fut.set_result(value)


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

"""The sound card as an ``AudioSink``: a sounddevice (PortAudio) ``OutputStream``."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import numpy as np

from pipeline.audio_out import DEFAULT_BLOCK_MS, as_int16, block_samples
from pipeline.sound_device import (
    AudioDeviceError,
    close_stream,
    device_name,
    import_sounddevice,
    stream_ended,
)

log = logging.getLogger(__name__)

_START_TIMEOUT_S = 5.0
# How long close() waits for a PortAudio call (flush, stop) before leaving it behind.
_CLOSE_TIMEOUT_S = 5.0
# Blocks are dated back to back (the chain) unless PortAudio's DAC time says this one
# is heard later (the output ran dry) or, outside a burst, this much earlier: the chain
# had run ahead of the device. After a late callback PortAudio catches up with a burst of
# blocks; chained through it, the dates stayed 40 ms late for the rest of the run while
# the device was back on time (talk over PulseAudio: the echo then came 40 ms sooner
# after its far end than before the burst). In steady pulling the two agree within ~7 ms.
_CHAIN_SLACK_S = 0.010
# A flush (abort + restart) whose stream then goes this long without a callback stalled:
# on a PulseAudio null sink that no other client holds at a low latency every restart went
# ~1.9 s without one (session 30, scripts/bench_flush.py; healthy: ~20 ms, one block).
# Watched for _RESTART_WATCH_S after the restart, polling every _WATCH_POLL_S.
# While a play waits, the stream is checked this often for having ended by itself.
_CHECK_S = 0.5
_RESTART_STALL_S = 0.3
_RESTART_WATCH_S = 0.5
_WATCH_POLL_S = 0.01


class SoundDeviceSink:
    """The sound card, through a sounddevice (PortAudio) ``OutputStream`` callback.

    The stream runs for the sink's whole life and plays silence when idle. The PortAudio
    callback copies one block at a time from the current ``play`` buffer and notes when
    that block will reach the speaker (PortAudio's DAC time), so:

    * ``play`` returns when the last sample has actually been heard, not when it was handed
      to the device: consecutive sentences are separated by the device latency (tens of ms
      with ``latency="low"``);
    * after ``stop()`` the blocks already queued in the device are discarded (``abort`` +
      restart on a helper thread) so silence does not wait for the device buffer to drain,
      and the count is the samples heard by then, exact to the DAC clock;
    * a device whose restart stalls (no callback for ``_RESTART_STALL_S``) is not flushed
      again (``flushes`` turns False, logged once): its queued blocks, one device latency,
      play out, ``play`` returns when they have been heard and counts them. A stall would
      hold the next reply back by more than the flush saves.
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
        self.flushes = True  # stop() drops the device's queue; off after a stalled restart
        self.reopened = 0  # times the stream ended by itself and was opened again
        self._lost = False  # it ended by itself and could not be opened again (yet)

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
            name = device_name(self.device)
            raise AudioDeviceError(f"cannot open output device {name}: {e}") from None
        log.info("output device %s open at %d Hz, latency %.0f ms", self.device or "default",
                 sample_rate, stream.latency * 1000)
        return stream

    def _callback(self, outdata: np.ndarray, frames: int, time_info: Any, status: Any) -> None:
        if status:
            log.debug("output stream status: %s", status)
        now = time.monotonic()
        steady = now - self._last_callback > 0.5 * self.block_ms / 1000
        if steady and self._last_callback:
            self._pulling.set()
        self._last_callback = now
        with self._lock:
            heard_at = self._heard_at(now + self._ahead(time_info), steady=steady)
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

    def _heard_at(self, dac: float, *, steady: bool) -> float:
        """When this block will be heard: PortAudio's DAC time ``dac``, or right after
        the previous block. After a start-up stall or an underrun PortAudio pulls several
        blocks at once, with DAC times that do not always move on: through such a burst
        they are chained, one after the other, never overlapping. Outside one (``steady``:
        the callback came at least half a block after the last), a chain more than
        ``_CHAIN_SLACK_S`` ahead of the DAC time is dropped for it."""
        chained = self._device_end
        if dac >= chained or (steady and chained - dac > _CHAIN_SLACK_S):
            return dac
        return chained

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
        if self._stream is None and not self._lost:
            raise RuntimeError("SoundDeviceSink.play() before open()")
        with self._lock:
            self._blocks = []  # heard_from() must not date this call by the last one
        if self._lost or self._ended():
            await self._reopen()
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
        # A device that stops pulling audio must not hang the turn; one whose stream
        # ended by itself is said at once.
        deadline = time.monotonic() + total / self.sample_rate + 5.0
        while not (consumed.done() or wake.done()):
            self._check_alive()
            if (left := deadline - time.monotonic()) <= 0:
                raise AudioDeviceError("output device stopped consuming audio")
            await asyncio.wait({consumed, wake}, timeout=min(left, _CHECK_S),
                               return_when=asyncio.FIRST_COMPLETED)
        if not wake.done():
            delay = consumed.result() - time.monotonic()
            if delay > 0:
                await asyncio.wait({wake}, timeout=delay)
        if not wake.done():
            return total
        silent_at = wake.result()  # later than now when the device's queue plays out
        if (left := silent_at - time.monotonic()) > 0:
            await asyncio.sleep(left)
        return self._heard_by(silent_at)

    def _ended(self) -> bool:
        """The stream ended by itself; not judged while a flush runs, whose abort passes
        through the same state."""
        flushing = self._flusher is not None and self._flusher.is_alive()
        return self._stream is not None and not flushing and stream_ended(self._stream)

    async def _reopen(self) -> None:
        """A stream that ended by itself since the last play (the sound server restarted,
        the device was replugged) is opened again before this one: a restart costs no
        reply. Still gone: open()'s one-line AudioDeviceError. A sink stopped by a
        barge-in stays stopped (opening resets it)."""
        log.warning("output device %s stopped taking audio (its stream ended); opening it "
                    "again", device_name(self.device))
        rate, stopped = self.sample_rate, self._stopped
        await self.close()
        self._lost = True  # until it opens: every play tries again
        try:
            await self.open(rate)
        except AudioDeviceError as e:
            name = device_name(self.device)
            why = str(e).removeprefix(f"cannot open output device {name}: ")
            raise AudioDeviceError(
                f"output device {name} stopped taking audio (its stream ended: unplugged, "
                f"or the sound server stopped) and does not open again ({why}); check it: "
                "the next reply tries again") from None
        self._lost = False
        self._stopped = self._stopped or stopped
        self.reopened += 1
        log.warning("output device %s is back", device_name(self.device))

    def _check_alive(self) -> None:
        """Say that the stream ended by itself while a play waited."""
        if self._ended():
            raise AudioDeviceError(
                f"output device {device_name(self.device)} stopped taking audio (its "
                "stream ended: unplugged, or the sound server stopped); check it, then "
                "start again")

    def heard_from(self) -> float | None:
        """When the first sample of the current (or last) ``play`` reached the speaker, on
        the DAC clock; None until the device has taken it."""
        with self._lock:
            return self._blocks[0][0] if self._blocks else None

    def heard_blocks(self) -> list[tuple[float, int]]:
        """(when it reached the speaker, samples) of every block of the current (or last)
        ``play`` handed to the device so far, on the DAC clock: a gap between two is the
        output running dry (``pipeline.playback_tap``)."""
        with self._lock:
            return list(self._blocks)

    def _heard_by(self, moment: float) -> int:
        with self._lock:
            blocks = list(self._blocks)
        return sum(min(n, max(0, round((moment - at) * self.sample_rate))) for at, n in blocks)

    def stop(self) -> None:
        now = time.monotonic()
        with self._lock:
            self._stopped = True
            self._buf = None
            queued_end = max((at + n / self.sample_rate for at, n in self._blocks),
                             default=now)
        # Silent now if the queue is dropped; else when its last block has been heard.
        silent_at = now if queued_end <= now or self._flush_device() else queued_end
        wake = self._wake
        if wake is not None:
            self._post(wake, silent_at)

    def _flush_device(self) -> bool:
        """Drop the blocks queued in the device now (PortAudio abort), then restart; False
        when not flushing (``flushes`` off, no stream, a flush still running)."""
        stream = self._stream
        if (not self.flushes or stream is None
                or (self._flusher is not None and self._flusher.is_alive())):
            return False
        self._flusher = threading.Thread(target=self._abort_and_restart, args=(stream,),
                                         name="audio-out-flush", daemon=True)
        self._flusher.start()
        return True

    def _abort_and_restart(self, stream: Any) -> None:
        # On a thread: abort and restart are PortAudio calls the sound server answers.
        try:
            stream.abort()
            with self._lock:
                self._device_end = 0.0  # the queued blocks were discarded
            stream.start()
        except Exception:  # a dead device shows up in play()'s timeout; keep the reason
            log.exception("output device flush failed")
            return
        stall = self._restart_stall(stream, time.monotonic())
        if stall is not None:
            self.flushes = False
            log.warning("output device took %.0f ms to take audio again after a flush "
                        "(barge-in); not flushing it any more: after a barge-in its queue "
                        "(%.0f ms) plays out", stall * 1000, float(stream.latency) * 1000)

    def _restart_stall(self, stream: Any, restarted: float) -> float | None:
        """Watch the callbacks for ``_RESTART_WATCH_S`` after a restart: None if they came
        steadily (or the sink closed), else how long the device went without one (waited
        for up to ``_CLOSE_TIMEOUT_S``)."""
        last, longest = restarted, 0.0
        while (now := time.monotonic()) < restarted + _RESTART_WATCH_S:
            if self._stream is not stream:
                return None
            last = max(last, self._last_callback)
            longest = max(longest, now - last)
            time.sleep(_WATCH_POLL_S)
        if longest < _RESTART_STALL_S:
            return None
        deadline = last + _CLOSE_TIMEOUT_S
        while (self._last_callback <= last and self._stream is stream
               and time.monotonic() < deadline):
            time.sleep(_WATCH_POLL_S)
        resumed = self._last_callback if self._last_callback > last else time.monotonic()
        return resumed - last

    def resume(self) -> None:
        self._stopped = False

    async def close(self) -> None:
        """Stop and close the device; a PortAudio call that hangs (an abort, restart or
        stop the sound server does not answer) is waited for ``_CLOSE_TIMEOUT_S`` at most
        and left behind on its daemon thread: closing must not hang the program."""
        self.stop()
        stream, self._stream = self._stream, None
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            await asyncio.to_thread(flusher.join, _CLOSE_TIMEOUT_S)
            if flusher.is_alive():
                log.warning("output device flush still running after %.0f s; closing anyway",
                            _CLOSE_TIMEOUT_S)
        if stream is not None:
            closer = threading.Thread(target=close_stream, args=(stream,),
                                      name="audio-out-close", daemon=True)
            closer.start()
            await asyncio.to_thread(closer.join, _CLOSE_TIMEOUT_S)
            if closer.is_alive():
                log.warning("output device did not close within %.0f s; left to the "
                            "process's exit", _CLOSE_TIMEOUT_S)


def _set_if_pending(fut: asyncio.Future[float], value: float) -> None:
    if not fut.done():
        fut.set_result(value)

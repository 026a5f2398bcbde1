"""The browser's speaker: an ``AudioSink`` that streams int16 blocks over a WebSocket.

Two pieces, both per browser session:

* ``Outbox`` is the only writer to the socket. JSON messages (timing events, transcript,
  sentences) and binary audio frames go through one queue, so the browser sees them in the
  order they happened, and listeners / ``stop()`` (plain methods) can send without awaiting.
* ``WebSocketSink`` paces blocks at real time against an absolute schedule, exactly like
  ``RealtimeNullSink``: a block is sent ``lead_s`` before its play time (the browser's
  jitter buffer), ``play`` returns when the last sample's play time has passed, and the
  count it returns is what the schedule had played. So ``stop()`` silences the browser
  within one block plus the lead (the queued audio is dropped and the page is told to flush
  what it holds) and the history is cut at what the user heard.

Audio frames are raw little-endian int16 mono; their rate comes first in ``audio.format``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Protocol

import numpy as np

from pipeline.audio_out import DEFAULT_BLOCK_MS, as_int16, block_samples

log = logging.getLogger(__name__)

DEFAULT_LEAD_MS = 80  # ahead of the play time: covers network and main-thread jitter


class MessageSocket(Protocol):
    """What the outbox needs of ``aiohttp.web.WebSocketResponse`` (fakes in tests)."""

    async def send_str(self, data: str) -> None: ...

    async def send_bytes(self, data: bytes) -> None: ...


_Item = tuple[str | bytes, int] | None  # (payload, audio generation or -1 for JSON)


class Outbox:
    """Ordered, non-blocking sending to one socket; ``run()`` is the writer task."""

    def __init__(self, ws: MessageSocket) -> None:
        self.ws = ws
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._generation = 0  # audio queued before the last drop_audio() is not sent
        self.closed = False
        self.audio_bytes_sent = 0

    def json(self, message: dict[str, Any]) -> None:
        if not self.closed:
            # default=str: event data may hold paths or numpy scalars; never lose an event.
            self._queue.put_nowait((json.dumps(message, ensure_ascii=False, default=str), -1))

    def audio(self, frame: bytes) -> None:
        if not self.closed:
            self._queue.put_nowait((frame, self._generation))

    def drop_audio(self) -> None:
        """Barge-in: audio already queued must not reach the browser."""
        self._generation += 1

    async def run(self) -> None:
        try:
            while (item := await self._queue.get()) is not None:
                payload, generation = item
                if isinstance(payload, str):
                    await self.ws.send_str(payload)
                elif generation == self._generation:
                    await self.ws.send_bytes(payload)
                    self.audio_bytes_sent += len(payload)
        except (ConnectionError, RuntimeError) as e:
            # The browser went away (aiohttp raises ClientConnectionResetError, a
            # ConnectionResetError, or RuntimeError on a closing socket): stop writing.
            log.debug("outbox stopped: %s", e)
        finally:
            self.closed = True

    def close(self) -> None:
        """Let the writer send what is queued, then end."""
        self._queue.put_nowait(None)


class WebSocketSink:
    """Plays int16 mono samples in a browser, at real-time pace, honouring ``stop()``."""

    def __init__(self, outbox: Outbox, block_ms: int = DEFAULT_BLOCK_MS,
                 lead_ms: int = DEFAULT_LEAD_MS) -> None:
        self.outbox = outbox
        self.block_ms = block_ms
        self.lead_s = lead_ms / 1000
        self.sample_rate = 0
        self.samples_sent = 0
        self._stopped = False
        self._wake: asyncio.Future[float] | None = None  # resolved by stop() with its time
        self._schedule_end: float | None = None  # loop time when the last sample plays

    async def open(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self._schedule_end = None
        self.outbox.json({"type": "audio.format", "sample_rate": sample_rate,
                          "encoding": "s16le", "channels": 1, "block_ms": self.block_ms,
                          "lead_ms": round(self.lead_s * 1000)})

    async def play(self, samples: np.ndarray) -> int:
        samples = as_int16(samples)
        if self.sample_rate <= 0:
            raise RuntimeError("WebSocketSink.play() before open()")
        if self._stopped or samples.size == 0 or self.outbox.closed:
            return 0
        loop = asyncio.get_running_loop()
        start = self._schedule_start(loop.time())
        wake: asyncio.Future[float] = loop.create_future()
        self._wake = wake
        try:
            played = await self._stream(loop, wake, start, samples)
        finally:
            self._wake = None
        self._schedule_end = None if wake.done() else start + played / self.sample_rate
        return played

    async def _stream(self, loop: asyncio.AbstractEventLoop, wake: asyncio.Future[float],
                      start: float, samples: np.ndarray) -> int:
        block = block_samples(self.sample_rate, self.block_ms)
        data = samples.astype("<i2", copy=False)
        for offset in range(0, data.size, block):
            if await self._sleep_until(loop, wake, start + offset / self.sample_rate
                                       - self.lead_s):
                return self._played_at(wake.result(), start, data.size)
            chunk = data[offset:offset + block]
            self.outbox.audio(chunk.tobytes())
            self.samples_sent += chunk.size
        if await self._sleep_until(loop, wake, start + data.size / self.sample_rate):
            return self._played_at(wake.result(), start, data.size)
        return data.size

    @staticmethod
    async def _sleep_until(loop: asyncio.AbstractEventLoop, wake: asyncio.Future[float],
                           deadline: float) -> bool:
        """Wait for ``deadline`` (loop time); True when ``stop()`` came first."""
        delay = deadline - loop.time()
        if delay > 0 and not wake.done():
            await asyncio.wait({wake}, timeout=delay)
        return wake.done()

    def _played_at(self, stopped_at: float, start: float, total: int) -> int:
        # The schedule says what the browser had played when stop() was called.
        return min(total, max(0, int((stopped_at - start) * self.sample_rate)))

    def _schedule_start(self, now: float) -> float:
        # Back-to-back sentences continue the same schedule (gapless in the browser);
        # after a real gap the browser's buffer ran dry, so start again one lead ahead.
        block_s = self.block_ms / 1000
        if self._schedule_end is not None and now - self._schedule_end < block_s:
            return self._schedule_end
        return now + self.lead_s

    def stop(self) -> None:
        self._stopped = True
        self._schedule_end = None
        self.outbox.drop_audio()
        # The page drops what it has buffered (at most the lead) on this message.
        self.outbox.json({"type": "audio.stop"})
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(wake.get_loop().time())

    def resume(self) -> None:
        self._stopped = False

    async def close(self) -> None:
        self._stopped = True
        wake = self._wake
        if wake is not None and not wake.done():
            wake.set_result(wake.get_loop().time())

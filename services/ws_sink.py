"""The browser's speaker: an ``AudioSink`` that streams int16 blocks over a WebSocket.

Two pieces, both per browser session:

* ``Outbox`` is the only writer to the socket. JSON messages (timing events, transcript,
  sentences) and binary audio frames go through one queue, so the browser sees them in the
  order they happened, and listeners / ``stop()`` (plain methods) can send without awaiting.
* ``WebSocketSink`` is a ``pipeline.audio_out.ScheduledSink`` (the schedule shared with
  ``RealtimeNullSink``): a block is sent ``lead_s`` before its play time (the browser's
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

from pipeline.audio_out import DEFAULT_BLOCK_MS, ScheduledSink

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


class WebSocketSink(ScheduledSink):
    """Plays int16 mono samples in a browser, at real-time pace, honouring ``stop()``."""

    def __init__(self, outbox: Outbox, block_ms: int = DEFAULT_BLOCK_MS,
                 lead_ms: int = DEFAULT_LEAD_MS) -> None:
        super().__init__(block_ms, lead_s=lead_ms / 1000)
        self.outbox = outbox
        self.samples_sent = 0

    async def open(self, sample_rate: int) -> None:
        await super().open(sample_rate)
        self.outbox.json({"type": "audio.format", "sample_rate": sample_rate,
                          "encoding": "s16le", "channels": 1, "block_ms": self.block_ms,
                          "lead_ms": round(self.lead_s * 1000)})

    def _can_play(self) -> bool:
        return super()._can_play() and not self.outbox.closed

    def _deliver(self, block: np.ndarray) -> None:
        self.outbox.audio(block.astype("<i2", copy=False).tobytes())
        self.samples_sent += block.size

    def stop(self) -> None:
        self.outbox.drop_audio()
        # The page drops what it has buffered (at most the lead) on this message.
        self.outbox.json({"type": "audio.stop"})
        super().stop()

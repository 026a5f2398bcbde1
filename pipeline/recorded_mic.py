"""A microphone that speaks recorded turns, in real time: the live path without a device.

``RecordedMic`` yields ``MicBlock``s of 20 ms every 20 ms (an absolute schedule, so it never
drifts), like ``MicSource``: the audio queued with ``say()``, and a faint noise floor in
between, as a quiet room would give. ``replay --live`` feeds it to the same segmenter,
barge-in watcher and live turn-taker as ``talk``, so live turn-taking is measured
repeatably from WAV files.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator

import numpy as np

from pipeline.audio_in import SAMPLE_RATE
from pipeline.mic import MicBlock

NOISE_FLOOR = 0.001  # about -60 dBFS: a room, not digital zeros (which no microphone gives)


class RecordedMic:
    def __init__(self, block_ms: int = 20, seed: int = 7) -> None:
        self.block = SAMPLE_RATE * block_ms // 1000
        self._pending: deque[tuple[np.ndarray, asyncio.Event]] = deque()
        self._offset = 0  # samples of the head of _pending already delivered
        self._rng = np.random.default_rng(seed)
        self._closed = False

    def say(self, audio: np.ndarray) -> asyncio.Event:
        """Queue an utterance; the event is set once its last sample was delivered."""
        done = asyncio.Event()
        self._pending.append((np.asarray(audio, dtype=np.float32).ravel(), done))
        return done

    def close(self) -> None:
        self._closed = True

    def __aiter__(self) -> AsyncIterator[MicBlock]:
        return self._blocks()

    async def _blocks(self) -> AsyncIterator[MicBlock]:
        start, delivered = time.monotonic(), 0
        while not self._closed:
            delivered += self.block
            # A block exists once its last sample has been "recorded".
            await asyncio.sleep(max(0.0, start + delivered / SAMPLE_RATE - time.monotonic()))
            yield MicBlock(self._next_block(), time.monotonic())

    def _next_block(self) -> np.ndarray:
        out = (self._rng.standard_normal(self.block) * NOISE_FLOOR).astype(np.float32)
        filled = 0
        while filled < self.block and self._pending:
            audio, done = self._pending[0]
            take = min(self.block - filled, audio.size - self._offset)
            out[filled:filled + take] = audio[self._offset:self._offset + take]
            filled += take
            self._offset += take
            if self._offset >= audio.size:
                self._pending.popleft()
                self._offset = 0
                done.set()
        return out

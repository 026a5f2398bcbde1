"""Barge-in: the one task that decides that the user interrupted the assistant.

Whatever the source - microphone speech while the assistant talks, a scripted time in
replay, the browser's interrupt message - the decision is made here and carried out by
``TurnRunner.interrupt()`` (silence, drop TTS, hang up on the LLM, confirm the slot idle).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from pipeline.events import Event

log = logging.getLogger(__name__)


class Interruptible(Protocol):
    def interrupt(self, source: str = "user") -> bool: ...


class BargeIn:
    def __init__(self, target: Interruptible) -> None:
        self.target = target
        self._playback_started = asyncio.Event()

    def on_event(self, ev: Event) -> None:
        """Event listener: follows the turn so sources know when the assistant speaks."""
        if ev.name == "turn.start":
            self._playback_started.clear()
        elif ev.name == "playback.start":
            self._playback_started.set()

    def trigger(self, source: str) -> bool:
        return self.target.interrupt(source)

    async def scripted(self, at_s: float) -> None:
        """Interrupt ``at_s`` seconds after this turn's playback starts (replay)."""
        await self._playback_started.wait()
        await asyncio.sleep(at_s)
        self.trigger(f"scripted@{at_s:g}s")

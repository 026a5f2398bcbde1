"""Keep the engines warm while the user speaks.

On these machines an engine that sat idle for a few seconds can be slow on its next call,
and a live turn always follows seconds of idling (the user was talking). After 6 s idle
against right after another call (``scripts/bench_idle.py``, three runs one night):
Whisper 1.03-1.45x, Piper 1.20-1.34x; in the loops that found it, up to 1.8x. Spinning
the CPU meanwhile did not help, running the engine did (docs/live.md, "Warm engines").
So while the user is speaking, and no turn runs, ``EngineWarmer`` runs a tiny pass of
each engine about once a second (``keep_warm()``: Whisper on 0.3 s of silence, Piper on
one word), so the turn that starts at the pause finds them warm.

A pass runs only while the voice is on (the caller's ``ready()``), so it ends before the
pause that starts the turn (a pass takes ~60-100 ms, the pause is 200 ms). What it costs:
one pass per second of the user's speech, about 10 % of the two cores while they speak.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

log = logging.getLogger(__name__)

WARM_EVERY_S = 1.0


@runtime_checkable
class Warmable(Protocol):
    def keep_warm(self) -> None:
        """A tiny blocking pass through the model, its result thrown away."""


class EngineWarmer:
    def __init__(self, engines: Sequence[object], *, ready: Callable[[], bool],
                 every_s: float = WARM_EVERY_S) -> None:
        # Engines without keep_warm (a Wyoming server: its machine, its caches) are skipped.
        self.engines: list[Warmable] = [e for e in engines if isinstance(e, Warmable)]
        self.ready = ready
        self.every_s = every_s
        self.passes = 0
        self._task: asyncio.Task[None] | None = None

    def speaking(self) -> None:
        """The voice started or came back: warm now, and every ``every_s`` while it lasts."""
        if self.engines and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="warm")

    def silent(self) -> None:
        """A pause or the end of the utterance: no new pass (one running ends by itself)."""
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        while True:
            if self.ready():
                started = time.monotonic()
                for engine in self.engines:
                    try:
                        await asyncio.to_thread(engine.keep_warm)
                    except Exception as e:  # a failed warm-up only costs latency
                        log.debug("keep_warm of %s failed: %s", type(engine).__name__, e)
                self.passes += 1
                log.debug("warm pass %d: %.0f ms", self.passes,
                          (time.monotonic() - started) * 1000)
            await asyncio.sleep(self.every_s)

"""``Outlet``: where a turn's stage puts its output for the next stage, knowing the mode.

Streamed, each item goes on the moment it is put; serial (the lab's starting point), the
stage's whole output is held until the stage is done. That is the only difference between
the two modes, so it lives here and nowhere else.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class Outlet(Generic[T]):
    def __init__(self, *, hold: bool) -> None:
        self._queue: asyncio.Queue[T | None] = asyncio.Queue()  # None: the producer is done
        self._held: list[T] | None = [] if hold else None

    def put(self, item: T) -> None:
        if self._held is not None:
            self._held.append(item)
        else:
            self._queue.put_nowait(item)

    def close(self) -> None:
        """The producer is done (finished, failed or cancelled): release what it held; the
        consumer's ``get`` then returns None."""
        for item in self._held or ():
            self._queue.put_nowait(item)
        self._held = None
        self._queue.put_nowait(None)

    async def get(self) -> T | None:
        """The next item, or None once the producer is done and everything was taken."""
        return await self._queue.get()

"""The one place tasks are created: named, tracked, and cancelled together.

A turn owns a ``TaskSet``; barge-in or an error in any stage cancels the whole set, then
waits (bounded) for the tasks to finish their ``finally`` blocks, which is where network
streams get closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


class TaskSet:
    def __init__(self, owner: str) -> None:
        self.owner = owner
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def spawn(self, name: str, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.create_task(coro, name=f"{self.owner}:{name}")
        self._tasks[name] = task
        task.add_done_callback(lambda t: self._tasks.pop(name, None))
        return task

    def __contains__(self, name: str) -> bool:
        return name in self._tasks

    def cancel(self, name: str) -> None:
        task = self._tasks.get(name)
        if task is not None:
            task.cancel()

    async def cancel_all(self, grace_s: float = 2.0) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace_s)
        for task in pending:
            log.warning("task %s did not stop within %.1f s", task.get_name(), grace_s)

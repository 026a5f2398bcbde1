"""llama-server slots shared by ``serve``'s conversations: one slot per conversation.

A conversation keeps its slot between turns, so llama-server finds the conversation's prefix
still in that slot's KV cache (``id_slot`` in every chat request). With more conversations
than slots, a turn waits in a FIFO queue until a slot is free: released by a conversation
that ended, or taken from one that has been idle for ``idle_lease_s`` (its next turn then
queues for a slot again and rebuilds its prefix once). A busy slot is never taken away,
and no conversation evicts another one's cache while that one is talking.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

DEFAULT_IDLE_LEASE_S = 30.0
DEFAULT_QUEUE_TIMEOUT_S = 60.0


class QueueTimeout(Exception):
    """No slot came free in time."""


@dataclass(eq=False)
class Lease:
    """One conversation's claim on a slot (``slot`` is None while it holds none)."""

    owner: str
    slot: int | None = None
    busy: bool = False
    idle_since: float = field(default_factory=time.monotonic)
    reclaimed: int = 0  # times its slot went to a waiting conversation
    closed: bool = False  # the conversation ended: it must never get a slot again


class SlotPool:
    def __init__(self, slots: int, *, idle_lease_s: float = DEFAULT_IDLE_LEASE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if slots < 1:
            raise ValueError("a slot pool needs at least one slot")
        self.slots = slots
        self.idle_lease_s = idle_lease_s
        self.clock = clock
        self.holders: dict[int, Lease] = {}
        self.waiting: list[Lease] = []  # FIFO: the head gets the next slot
        self._changed = asyncio.Event()

    @property
    def in_use(self) -> int:
        return len(self.holders)

    def position(self, lease: Lease) -> int | None:
        """1 = next in line; None when not waiting."""
        return self.waiting.index(lease) + 1 if lease in self.waiting else None

    def try_acquire(self, lease: Lease) -> bool:
        """Give ``lease`` a slot now if one is free (or reclaimable) and nobody waits."""
        if lease.slot is not None:
            return True
        if lease.closed:
            raise QueueTimeout("the conversation was closed while it waited for a slot")
        if self.waiting and self.waiting[0] is not lease:
            return False
        slot = self._free_slot()
        if slot is None:
            return False
        self._assign(lease, slot)
        return True

    async def acquire(self, lease: Lease,
                      limit_s: float = DEFAULT_QUEUE_TIMEOUT_S) -> float:
        """Wait in line for a slot; returns the seconds waited. Raises ``QueueTimeout``."""
        start = self.clock()
        if lease.slot is not None or (not self.waiting and self.try_acquire(lease)):
            return 0.0
        self.waiting.append(lease)
        try:
            while not self.try_acquire(lease):
                remaining = start + limit_s - self.clock()
                if remaining <= 0:
                    raise QueueTimeout(f"all {self.slots} LLM slot(s) stayed busy for "
                                       f"{limit_s:g} s")
                changed = self._changed
                # Woken by a release or a turn's end; also every second, because an idle
                # holder becomes reclaimable by the passing of time alone.
                try:
                    await asyncio.wait_for(changed.wait(), min(remaining, 1.0))
                except TimeoutError:
                    pass
        finally:
            if lease in self.waiting:
                self.waiting.remove(lease)
                self._signal()  # the next in line may now be the head
        return self.clock() - start

    def begin(self, lease: Lease) -> None:
        """A turn starts on the lease's slot: it cannot be reclaimed until ``end``."""
        lease.busy = True

    def end(self, lease: Lease) -> None:
        lease.busy = False
        lease.idle_since = self.clock()
        self._signal()

    def release(self, lease: Lease) -> None:
        """The conversation ended: its slot goes to the next in line."""
        if lease.slot is not None and self.holders.get(lease.slot) is lease:
            del self.holders[lease.slot]
        lease.slot = None
        lease.closed = True
        if lease in self.waiting:
            self.waiting.remove(lease)
        self._signal()

    # -- internals ----------------------------------------------------------------------
    def _free_slot(self) -> int | None:
        for slot in range(self.slots):
            if slot not in self.holders:
                return slot
        now = self.clock()
        idle = [(lease.idle_since, slot) for slot, lease in self.holders.items()
                if not lease.busy and now - lease.idle_since >= self.idle_lease_s]
        if not idle:
            return None
        _, slot = min(idle)  # the longest idle gives its slot up
        taken = self.holders.pop(slot)
        taken.slot = None
        taken.reclaimed += 1
        return slot

    def _assign(self, lease: Lease, slot: int) -> None:
        self.holders[slot] = lease
        lease.slot = slot
        lease.idle_since = self.clock()

    def _signal(self) -> None:
        # Swap the event: everyone waiting on the old one wakes, later waiters wait anew.
        self._changed.set()
        self._changed = asyncio.Event()

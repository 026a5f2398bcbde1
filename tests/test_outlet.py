"""Outlet: streamed passes each item on at once, serial holds everything until close()."""

from __future__ import annotations

from pipeline.outlet import Outlet


async def drain(outlet: Outlet[int]) -> list[int]:
    items = []
    while (item := await outlet.get()) is not None:
        items.append(item)
    return items


async def test_streamed_items_are_available_before_the_producer_is_done() -> None:
    outlet: Outlet[int] = Outlet(hold=False)
    outlet.put(1)
    assert await outlet.get() == 1
    outlet.put(2)
    outlet.close()
    assert await drain(outlet) == [2]


async def test_serial_holds_everything_until_close_then_releases_it_in_order() -> None:
    outlet: Outlet[int] = Outlet(hold=True)
    outlet.put(1)
    outlet.put(2)
    assert outlet._queue.empty()  # nothing reaches the next stage yet
    outlet.close()
    assert await drain(outlet) == [1, 2]

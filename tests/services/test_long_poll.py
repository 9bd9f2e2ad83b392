"""WaiterRegistry: wake, timeout, tag filters, unfiltered keys, several keys, cap, shutdown,
abandon, cleanup."""

from __future__ import annotations

import asyncio

import pytest

from services import WaiterRegistry, WakeReason
from services.errors import TooManyWaitersError
from storage import TagFilter
from storage.record.java_hash import tags_code


def registered(registry: WaiterRegistry) -> int:
    """Keys that still hold a waiter (white box: a woken or dead waiter must leave none)."""
    return len(registry._by_key)


async def parked(registry: WaiterRegistry, count: int) -> None:
    for _ in range(100_000):
        if registry.parked >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{registry.parked} parked, not {count}")


async def test_notify_wakes_the_waiter_of_its_key() -> None:
    registry = WaiterRegistry(10)
    waiter = asyncio.create_task(registry.wait([("T", 0)], 10))
    await parked(registry, 1)
    registry.notify("T", 1, 0)  # another queue
    await asyncio.sleep(0)
    assert not waiter.done()
    registry.notify("T", 0, 0)
    registry.notify("T", 0, 0)  # idempotent
    assert await waiter is WakeReason.ARRIVED
    assert registry.parked == 0 and registered(registry) == 0
    assert registry.woken == 1


async def test_wake_queue_wakes_every_waiter_of_its_queue_whatever_its_filter() -> None:
    registry = WaiterRegistry(10)
    filtered = asyncio.create_task(registry.wait([("T", 0)], 10, TagFilter("A")))
    other = asyncio.create_task(registry.wait([("T", 1)], 10, TagFilter("A")))
    await parked(registry, 2)
    registry.notify("T", 0, tags_code("B"))
    await asyncio.sleep(0)
    assert not filtered.done()
    registry.wake_queue("T", 0)
    assert await filtered is WakeReason.ARRIVED
    assert not other.done()
    registry.wake_queue("T", 1)
    assert await other is WakeReason.ARRIVED
    assert registry.woken == 2 and registered(registry) == 0


async def test_timeout_leaves_nothing_behind() -> None:
    registry = WaiterRegistry(10)
    assert await registry.wait([("T", 0)], 0.01) is WakeReason.TIMEOUT
    assert await registry.wait([("T", 0)], 0) is WakeReason.TIMEOUT
    assert registry.parked == 0 and registered(registry) == 0


async def test_tag_filter_skips_arrivals_that_cannot_match() -> None:
    registry = WaiterRegistry(10)
    waiter = asyncio.create_task(registry.wait([("T", 0)], 10, TagFilter("A||B")))
    await parked(registry, 1)
    registry.notify("T", 0, tags_code("C"))
    await asyncio.sleep(0)
    assert not waiter.done()
    registry.notify("T", 0, tags_code("B"))
    assert await waiter is WakeReason.ARRIVED


async def test_unfiltered_keys_wake_whatever_the_tag() -> None:
    registry = WaiterRegistry(10)
    waiter = asyncio.create_task(
        registry.wait([("T", 0)], 10, TagFilter("A"), unfiltered=[("%RETRY%g", 0)])
    )
    await parked(registry, 1)
    assert registered(registry) == 2
    registry.notify("T", 0, tags_code("B"))  # the filter still applies to the topic's queue
    await asyncio.sleep(0)
    assert not waiter.done()
    registry.notify("%RETRY%g", 0, tags_code("B"))
    assert await waiter is WakeReason.ARRIVED
    assert registered(registry) == 0


async def test_one_waiter_on_several_keys() -> None:
    registry = WaiterRegistry(10)
    waiter = asyncio.create_task(registry.wait([("T", q) for q in range(4)], 10))
    await parked(registry, 1)
    assert registered(registry) == 4
    registry.notify("T", 3, 0)
    assert await waiter is WakeReason.ARRIVED
    assert registered(registry) == 0


async def test_many_waiters_on_one_key_all_wake() -> None:
    registry = WaiterRegistry(100)
    waiters = [asyncio.create_task(registry.wait([("T", 0)], 10)) for _ in range(50)]
    await parked(registry, 50)
    registry.notify("T", 0, 0)
    assert set(await asyncio.gather(*waiters)) == {WakeReason.ARRIVED}


async def test_cap_refuses_beyond_max_parked() -> None:
    registry = WaiterRegistry(2, retry_after_s=3)
    waiters = [asyncio.create_task(registry.wait([("T", q)], 10)) for q in range(2)]
    await parked(registry, 2)
    with pytest.raises(TooManyWaitersError) as caught:
        await registry.wait([("T", 9)], 10)
    assert caught.value.retry_after_s == 3
    assert registry.rejected == 1
    registry.close()
    assert set(await asyncio.gather(*waiters)) == {WakeReason.SHUTDOWN}


async def test_close_wakes_everyone_and_refuses_new_waits() -> None:
    registry = WaiterRegistry(10)
    waiter = asyncio.create_task(registry.wait([("T", 0)], 10))
    await parked(registry, 1)
    registry.close()
    assert await waiter is WakeReason.SHUTDOWN
    assert await registry.wait([("T", 0)], 10) is WakeReason.SHUTDOWN
    assert registry.parked == 0


async def test_abandon_and_cancel_clean_up() -> None:
    registry = WaiterRegistry(10)
    abandon: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiter = asyncio.create_task(registry.wait([("T", 0)], 10, None, abandon))
    await parked(registry, 1)
    abandon.set_result(None)
    assert await waiter is WakeReason.ABANDONED
    cancelled = asyncio.create_task(registry.wait([("T", 0)], 10))
    await parked(registry, 1)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert registry.parked == 0 and registered(registry) == 0

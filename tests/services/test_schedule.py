"""Delayed delivery: a message with a delay level is invisible until its time, then delivered
to its real topic and queue; progress survives a restart (at-least-once, nothing lost)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.schedule import DelayScheduler
from storage import Message
from storage.config_managers import DelayOffsetManager
from storage.delay_levels import SCHEDULE_TOPIC
from tests.services.conftest import World, open_world, wait_for


async def test_delayed_message_is_invisible_before_its_time_and_visible_after(world: World) -> None:
    scheduler = DelayScheduler(world.store, world.delays, world.idempotency.reput)
    await scheduler.start()
    try:
        sent = world.store.put(
            [Message("Orders", b"later", queue_id=2, properties={"DELAY": "1", "TAGS": "A"})]
        )[0]
        assert sent.topic == SCHEDULE_TOPIC
        assert world.pull_all("Orders") == []
        await asyncio.sleep(0.5)
        assert world.pull_all("Orders") == [], "not before its delivery time"
        await wait_for(lambda: world.pull_all("Orders") != [])
        [delivered] = world.pull_all("Orders")
        assert delivered.body == b"later"
        assert delivered.queue_id == 2
        assert delivered.tags == "A"
        assert "DELAY" not in delivered.properties
        assert delivered.store_timestamp - sent.store_timestamp >= 1000
        assert world.delays.get(1) == 1
    finally:
        await scheduler.stop()


async def test_restart_in_the_middle_of_a_delay_delivers_every_message_once(
    tmp_path: Path,
) -> None:
    world = open_world(tmp_path)
    scheduler = DelayScheduler(world.store, world.delays, world.idempotency.reput)
    await scheduler.start()
    for i in range(5):
        world.store.put([Message("Orders", f"m{i}".encode(), properties={"DELAY": "3"})])
    await scheduler.stop()  # before any is due
    world.store.close()

    world = open_world(tmp_path)
    assert world.delays.get(3) == 0
    scheduler = DelayScheduler(world.store, world.delays, world.idempotency.reput)
    await scheduler.start()
    try:
        await wait_for(lambda: len(world.pull_all("Orders")) == 5)
        await asyncio.sleep(0.3)
        assert sorted(m.body for m in world.pull_all("Orders")) == [
            f"m{i}".encode() for i in range(5)
        ]
    finally:
        await scheduler.stop()
        world.store.close()
    reloaded = DelayOffsetManager(tmp_path / "config")
    reloaded.load()
    assert reloaded.get(3) == 5

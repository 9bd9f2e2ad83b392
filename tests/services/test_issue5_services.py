"""Delayed delivery, send-back/DLQ, offset reset previews and DLQ redrive — on a real store
with real config managers (the HTTP layer is tested over a live server elsewhere)."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.dlq import PROPERTY_REDRIVEN_FROM, DlqFilter, DlqService, RedriveStatus
from services.errors import InvalidOffsetError, MessageNotFoundError
from services.messages import within_bytes
from services.offset_reset import OffsetResetService, ResetRequest, ResetTarget
from services.schedule import DelayScheduler
from services.send_back import (
    Destination,
    SendBackRequest,
    SendBackService,
    dlq_topic,
    retry_topic,
)
from storage import Message, MessageStore, PutResult, StoreConfig, StoredMessage
from storage.config_managers import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
)
from storage.delay_levels import SCHEDULE_TOPIC

LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"


@dataclass
class World:
    root: Path
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    delays: DelayOffsetManager

    async def put(self, messages: list[Message]) -> list[PutResult]:
        if len(messages) == 1:
            return [self.store.put_message(messages[0])]
        return self.store.put_messages(messages)

    async def ensure_topic(self, config: TopicConfig) -> None:
        if self.topics.get(config.topic_name) is None:
            self.topics.put(config)

    async def group(self, name: str) -> SubscriptionGroupConfig:
        return self.groups.get_or_create(name)

    async def topic_for_send(self, name: str) -> TopicConfig:
        config = self.topics.get(name)
        if config is None:
            config = TopicConfig(name, read_queue_nums=4, write_queue_nums=4)
            self.topics.put(config)
        return config

    def pull_all(self, topic: str) -> list[StoredMessage]:
        found = []
        for queue_id in self.store.queue_ids(topic):
            found.extend(self.store.get_message("g", topic, queue_id, 0, 1000).messages)
        return sorted(found, key=lambda m: m.physical_offset)


def open_world(root: Path) -> World:
    store = MessageStore.open(
        root, StoreConfig(commit_log_file_size=1024 * 1024, message_delay_levels=LEVELS)
    )
    config = root / "config"
    world = World(
        root,
        store,
        TopicConfigManager(config),
        SubscriptionGroupManager(config),
        ConsumerOffsetManager(config),
        DelayOffsetManager(config),
    )
    for manager in (world.topics, world.groups, world.offsets, world.delays):
        manager.load()
    return world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    opened = open_world(tmp_path)
    yield opened
    opened.store.close()


async def wait_for(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Poll a condition on state this test does not produce itself (the scheduler does)."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


# ---------------------------------------------------------------- delayed delivery


async def test_delayed_message_is_invisible_before_its_time_and_visible_after(world: World) -> None:
    scheduler = DelayScheduler(world.store, world.delays, world.put)
    await scheduler.start()
    try:
        sent = world.store.put_message(
            Message("Orders", b"later", queue_id=2, properties={"DELAY": "1", "TAGS": "A"})
        )
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
    scheduler = DelayScheduler(world.store, world.delays, world.put)
    await scheduler.start()
    for i in range(5):
        world.store.put_message(Message("Orders", f"m{i}".encode(), properties={"DELAY": "3"}))
    await scheduler.stop()  # before any is due
    world.store.close()

    world = open_world(tmp_path)
    assert world.delays.get(3) == 0
    scheduler = DelayScheduler(world.store, world.delays, world.put)
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


# ---------------------------------------------------------------- send-back and DLQ


async def test_send_back_retries_with_growing_delay_then_dead_letters(world: World) -> None:
    service = SendBackService(
        world.store, world.group, world.ensure_topic, world.put, random.Random(1)
    )
    world.groups.put(SubscriptionGroupConfig("g", retry_max_times=3))
    first = world.store.put_message(
        Message("Orders", b"poison", properties={"TAGS": "A", "UNIQ_KEY": "U" * 32})
    )
    current = first.msg_id
    levels = []
    for attempt in range(3):
        result = await service.send_back(SendBackRequest("g", msg_id=current))
        assert result.destination is Destination.RETRY
        assert result.topic == retry_topic("g")
        assert result.reconsume_times == attempt + 1
        assert result.origin_msg_id == first.msg_id
        levels.append(result.delay_level)
        scheduled = world.store.look_message_by_id(result.msg_id)
        assert scheduled is not None and scheduled.topic == SCHEDULE_TOPIC
        assert scheduled.properties["RETRY_TOPIC"] == "Orders"
        assert scheduled.properties["UNIQ_KEY"] == "U" * 32
        current = result.msg_id
    assert levels == [3, 4, 5]
    final = await service.send_back(SendBackRequest("g", msg_id=current))
    assert final.destination is Destination.DLQ
    assert final.topic == dlq_topic("g")
    assert final.delay_level == 0
    [dead] = world.pull_all(dlq_topic("g"))
    assert dead.reconsume_times == 4
    assert dead.properties["RETRY_TOPIC"] == "Orders"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == first.msg_id
    assert world.topics.get(dlq_topic("g")) is not None


async def test_negative_delay_level_goes_straight_to_the_dlq(world: World) -> None:
    service = SendBackService(world.store, world.group, world.ensure_topic, world.put)
    sent = world.store.put_message(Message("Orders", b"bad"))
    result = await service.send_back(
        SendBackRequest("g", commit_log_offset=sent.physical_offset, delay_level=-1)
    )
    assert result.destination is Destination.DLQ
    with pytest.raises(MessageNotFoundError):
        await service.send_back(SendBackRequest("g", commit_log_offset=sent.physical_offset + 1))


async def test_retried_message_returns_to_the_retry_topic_after_its_delay(world: World) -> None:
    scheduler = DelayScheduler(world.store, world.delays, world.put)
    await scheduler.start()
    try:
        service = SendBackService(world.store, world.group, world.ensure_topic, world.put)
        sent = world.store.put_message(Message("Orders", b"again"))
        await service.send_back(SendBackRequest("g", msg_id=sent.msg_id))
        await wait_for(lambda: world.pull_all(retry_topic("g")) != [])
        [back] = world.pull_all(retry_topic("g"))
        assert back.body == b"again" and back.reconsume_times == 1
    finally:
        await scheduler.stop()


# ---------------------------------------------------------------- offset reset


async def test_reset_preview_matches_what_the_reset_then_does(world: World) -> None:
    world.topics.put(TopicConfig("Orders", read_queue_nums=2, write_queue_nums=2))
    stamps = []
    for i in range(10):
        stamps.append(world.store.put_message(Message("Orders", b"x", queue_id=i % 2)))
        await asyncio.sleep(0.002)
    world.offsets.commit_offset("g", "Orders", 0, 3)
    service = OffsetResetService(world.store, world.offsets)
    orders = world.topics.get("Orders")
    assert orders is not None
    topics = [orders]
    middle = stamps[4].store_timestamp  # queue 0, offset 2
    request = ResetRequest(ResetTarget.TIMESTAMP, "Orders", timestamp_ms=middle, dry_run=True)
    plan = service.plan("g", request, topics)
    by_queue = {q.queue_id: q for q in plan.queues}
    assert (by_queue[0].current_offset, by_queue[0].target_offset) == (3, 2)
    assert by_queue[0].redelivered == 1
    assert (by_queue[1].current_offset, by_queue[1].target_offset) == (-1, 2)
    assert by_queue[1].skipped == 2
    assert world.offsets.query_offset("g", "Orders", 0) == 3, "a preview changes nothing"
    applied = service.apply(plan)
    assert applied.applied
    assert world.offsets.offsets_of("g", "Orders") == {0: 2, 1: 2}

    latest = service.plan("g", ResetRequest(ResetTarget.LATEST, "Orders"), topics)
    assert [(q.target_offset, q.skipped) for q in latest.queues] == [(5, 3), (5, 3)]
    with pytest.raises(InvalidOffsetError):
        service.plan("g", ResetRequest(ResetTarget.OFFSETS, "Orders", offsets={0: 99}), topics)
    with pytest.raises(InvalidOffsetError):
        service.plan("g", ResetRequest(ResetTarget.OFFSETS, "Orders", offsets={7: 0}), topics)


# ---------------------------------------------------------------- DLQ redrive


async def test_redrive_moves_exactly_the_filtered_dead_letters_once(world: World) -> None:
    back = SendBackService(world.store, world.group, world.ensure_topic, world.put)
    for i in range(6):
        sent = world.store.put_message(
            Message(
                "Orders",
                f"dead {i}".encode(),
                properties={"TAGS": "bad" if i % 2 else "worse", "UNIQ_KEY": f"{i:032X}"},
            )
        )
        await back.send_back(SendBackRequest("g", msg_id=sent.msg_id, delay_level=-1))
    dlq = DlqService(world.store, world.topic_for_send, world.put)
    page = dlq.browse("g", None, 4)
    assert len(page.entries) == 4 and page.next_offset == 4 and page.max_offset == 6
    assert all(e.original_topic == "Orders" and e.redriven_as is None for e in page.entries)

    selection = DlqFilter(tags={"bad"})
    preview = await dlq.redrive("g", selection, dry_run=True)
    assert [o.status for o in preview.outcomes] == [RedriveStatus.WOULD_MOVE] * 3
    assert world.pull_all("Orders") != [] and len(world.pull_all("Orders")) == 6

    report = await dlq.redrive("g", selection)
    assert report.count(RedriveStatus.MOVED) == 3
    moved = [m for m in world.pull_all("Orders") if PROPERTY_REDRIVEN_FROM in m.properties]
    assert sorted(m.body for m in moved) == [b"dead 1", b"dead 3", b"dead 5"]
    assert all(m.reconsume_times == 0 for m in moved)

    again = await dlq.redrive("g", selection)
    assert again.count(RedriveStatus.ALREADY_MOVED) == 3
    assert len([m for m in world.pull_all("Orders") if PROPERTY_REDRIVEN_FROM in m.properties]) == 3

    to_other = await dlq.redrive(
        "g", DlqFilter(msg_ids={page.entries[0].message.msg_id}), target_topic="Repair"
    )
    assert [o.status for o in to_other.outcomes] == [RedriveStatus.MOVED]
    assert [m.body for m in world.pull_all("Repair")] == [b"dead 0"]
    status = dlq.browse("g", None, 10)
    redriven = {e.message.body for e in status.entries if e.redriven_as}
    assert redriven == {b"dead 1", b"dead 3", b"dead 5"}


async def test_dead_letter_pages_and_key_lookups_keep_to_a_byte_budget(world: World) -> None:
    back = SendBackService(world.store, world.group, world.ensure_topic, world.put)
    for i in range(5):
        sent = world.store.put_message(
            Message("Big", bytes([65 + i]) * 1000, properties={"KEYS": "same"})
        )
        await back.send_back(SendBackRequest("g", msg_id=sent.msg_id, delay_level=-1))
    dlq = DlqService(world.store, world.topic_for_send, world.put)
    page = dlq.browse("g", None, 10, max_bytes=2500)
    assert len(page.entries) == 2 and page.next_offset == 2
    rest = dlq.browse("g", page.next_offset, 10, max_bytes=2500)
    assert [e.queue_offset for e in rest.entries] == [2, 3]
    assert len(dlq.browse("g", None, 10, max_bytes=10).entries) == 1, "the first always"
    found = world.store.query_message("Big", "same")
    assert len(within_bytes(found, 2500)) == 2
    assert within_bytes(found, None) == found

"""Range reads: one queue's records as stored, by the pull's rules (permissions, filters, a
group's stored filter, statuses) and its long poll."""

from __future__ import annotations

import asyncio

import pytest

from services import Broker, OutgoingMessage
from services.errors import QueueNotFoundError, TopicNotReadableError
from storage.config_records import SubscriptionGroupConfig
from storage.record.message import GetMessageStatus
from tests.services.conftest import until


async def test_a_range_read_follows_the_pulls_rules(broker: Broker) -> None:
    await broker.topics.put("Ranged", read_queue_nums=2, write_queue_nums=2, perm=6)
    sent = [
        OutgoingMessage(f"m{i}".encode(), queue_id=0, tags="Aa" if i % 2 else "BB")
        for i in range(6)
    ]
    await broker.send.send("Ranged", sent)
    every = await broker.records.read_records("Ranged", 0, None, 1 << 20)
    assert (every.status, every.offset, every.next_offset, every.count) == (
        GetMessageStatus.FOUND, 0, 6, 6,
    )  # fmt: skip
    tagged = await broker.records.read_records("Ranged", 0, 0, 1 << 20, tags="Aa")  # "BB" collides
    assert (tagged.count, tagged.next_offset) == (3, 6)
    empty = await broker.records.read_records("Ranged", 1, 0, 1 << 20)
    assert (empty.status, empty.records) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, b"")
    with pytest.raises(QueueNotFoundError):
        await broker.records.read_records("Ranged", 2, 0, 1 << 20)
    await broker.topics.put("Ranged", read_queue_nums=2, write_queue_nums=2, perm=2)
    with pytest.raises(TopicNotReadableError):
        await broker.records.read_records("Ranged", 0, 0, 1 << 20)


async def test_a_range_read_long_polls_at_the_head_as_a_pull_does(broker: Broker) -> None:
    await broker.send.send("Head", [OutgoingMessage(b"m0", queue_id=0, tags="A")])
    read = asyncio.create_task(broker.records.read_records("Head", 0, 1, 1 << 20, wait_ms=20_000))
    await until(lambda: broker.waiters.parked == 1)
    await broker.send.send("Head", [OutgoingMessage(b"m1", queue_id=0, tags="A")])
    woken = await read
    assert (woken.status, woken.offset, woken.next_offset, woken.count) == (
        GetMessageStatus.FOUND, 1, 2, 1,
    )  # fmt: skip
    assert broker.waiters.woken == 1, "woken by the arrival, not by the timeout"
    at_end = await broker.records.read_records("Head", 0, 0, 1 << 20, end_offset=1, wait_ms=20_000)
    assert at_end.count == 1  # a range that is there answers at once
    empty = await broker.records.read_records("Head", 0, 2, 1 << 20, wait_ms=20)
    assert (empty.status, empty.records) == (GetMessageStatus.OFFSET_OVERFLOW_ONE, b"")
    assert broker.waiters.parked == 0


async def test_a_filtered_range_read_waits_past_what_its_filter_skips(broker: Broker) -> None:
    await broker.send.send("Skip", [OutgoingMessage(b"no", queue_id=0, tags="B")])
    read = asyncio.create_task(
        broker.records.read_records("Skip", 0, 0, 1 << 20, tags="A", wait_ms=20_000)
    )
    await until(lambda: broker.waiters.parked == 1)  # past offset 0, parked at the head
    await broker.send.send("Skip", [OutgoingMessage(b"no", queue_id=0, tags="B")])
    await broker.send.send("Skip", [OutgoingMessage(b"yes", queue_id=0, tags="A")])
    found = await read
    assert (found.status, found.next_offset, found.count) == (GetMessageStatus.FOUND, 3, 1)
    assert b"yes" in found.records and b"no" not in found.records
    skipped = await broker.records.read_records("Skip", 0, 0, 1 << 20, tags="C", wait_ms=30)
    assert (skipped.status, skipped.next_offset, skipped.count) == (
        GetMessageStatus.NO_MATCHED_MESSAGE, 3, 0,
    )  # fmt: skip


async def test_a_range_read_by_a_group_applies_its_stored_filter(broker: Broker) -> None:
    regions = ["eu", "us", "eu"]
    sent = [
        OutgoingMessage(f"m{i}".encode(), queue_id=0, properties={"region": r})
        for i, r in enumerate(regions)
    ]
    await broker.send.send("Stored", sent)
    await broker.groups.put(SubscriptionGroupConfig("G", filters={"Stored": "region = 'eu'"}))
    by_group = await broker.records.read_records("Stored", 0, 0, 1 << 20, group="G")
    assert (by_group.count, by_group.next_offset) == (2, 3)
    own = await broker.records.read_records("Stored", 0, 0, 1 << 20, sql="region = 'us'", group="G")
    assert own.count == 1  # a read's own filter comes first, as a pull's

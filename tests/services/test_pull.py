"""Pull: RocketMQ's statuses for one queue and a group, and when a pull parks (long-poll)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, OutgoingMessage, PullOptions
from services.send_back import SendBackRequest
from storage import MessageStore
from storage.record.message import GetMessageStatus
from storage.topic_names import retry_topic
from tests.services.conftest import LEVELS, SMALL, until


async def test_pull_waits_only_the_remaining_time_and_wakes_on_put(broker: Broker) -> None:
    await broker.send.send("W", [OutgoingMessage(b"first", queue_id=0)])
    pull = asyncio.create_task(broker.pull.pull_queue("W", 0, 1, PullOptions(wait_ms=20_000)))
    await until(lambda: broker.waiters.parked > 0)
    await broker.send.send("W", [OutgoingMessage(b"second", queue_id=0)])
    got = await pull
    assert got.status is GetMessageStatus.FOUND
    assert [m.body for m in got.messages] == [b"second"]
    empty = await broker.pull.pull_queue("W", 0, 2, PullOptions(wait_ms=20))
    assert empty.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert broker.waiters.parked == 0


async def test_a_declared_queue_no_message_reached_is_empty_not_unknown(broker: Broker) -> None:
    await broker.topics.put("Fresh", read_queue_nums=4, write_queue_nums=4, perm=6)
    await broker.send.send("Fresh", [OutgoingMessage(b"x", queue_id=0)])
    empty = await broker.pull.pull_queue("Fresh", 3, 0, PullOptions())
    assert (empty.status, empty.next_offset, empty.max_offset) == (
        GetMessageStatus.NO_MESSAGE_IN_QUEUE,
        0,
        0,
    )
    moved = await broker.pull.pull_queue("Fresh", 3, 5, PullOptions())
    assert (moved.status, moved.next_offset) == (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0)
    parked = asyncio.create_task(broker.pull.pull_queue("Fresh", 3, 0, PullOptions(wait_ms=20_000)))
    await until(lambda: broker.waiters.parked == 1)
    await broker.send.send("Fresh", [OutgoingMessage(b"y", queue_id=3)])
    assert [m.body for m in (await parked).messages] == [b"y"]


@pytest.fixture
async def gapped(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker whose ConsumeQueue files hold 16 units each."""
    config = dataclasses.replace(SMALL, consume_queue_units_per_file=16)
    broker = Broker(BrokerConfig(tmp_path / "store", config))
    await broker.start()
    yield broker
    await broker.stop()


def drop_first_consume_queue_file(broker: Broker, topic: str) -> None:
    """What a cleaner racing a pull leaves: the queue's first file gone, its min offset not
    moved yet (the store itself is private to the broker; only a test plays the cleaner)."""
    store: MessageStore | None = broker._store
    assert store is not None
    queue = store.find_consume_queue(topic, 0)
    assert queue is not None
    queue.queue.delete_first_files(1)


async def test_offset_found_null_parks_once_then_answers_the_next_file(gapped: Broker) -> None:
    await gapped.send.send("Gap", [OutgoingMessage(b"m", queue_id=0) for _ in range(20)])
    drop_first_consume_queue_file(gapped, "Gap")
    at_once = await gapped.pull.pull_queue("Gap", 0, 0, PullOptions())
    assert (at_once.status, at_once.next_offset) == (GetMessageStatus.OFFSET_FOUND_NULL, 16)
    pull = asyncio.create_task(gapped.pull.pull_queue("Gap", 0, 0, PullOptions(wait_ms=20_000)))
    await until(lambda: gapped.waiters.parked == 1)
    await gapped.send.send("Gap", [OutgoingMessage(b"new", queue_id=0)])
    woken = await pull
    assert (woken.status, woken.next_offset, woken.messages) == (
        GetMessageStatus.OFFSET_FOUND_NULL,
        16,
        [],
    )
    assert gapped.waiters.parked == 0
    found = await gapped.pull.pull_queue("Gap", 0, woken.next_offset, PullOptions())
    assert found.status is GetMessageStatus.FOUND


@pytest.fixture
async def quick_retries(tmp_path: Path) -> AsyncIterator[Broker]:
    """A broker whose every delay level is one second."""
    config = dataclasses.replace(SMALL, message_delay_levels=LEVELS)
    broker = Broker(BrokerConfig(tmp_path / "store", config))
    await broker.start()
    yield broker
    await broker.stop()


async def test_group_long_poll_wakes_on_a_retry_whatever_its_tag(quick_retries: Broker) -> None:
    broker = quick_retries
    [failed] = await broker.send.send("Tagged", [OutgoingMessage(b"B1", tags="B")])
    await broker.send_back.send_back(SendBackRequest("g", msg_id=failed.msg_id, delay_level=1))
    assert broker.topics.get(retry_topic("g")) is not None
    pull = asyncio.create_task(
        broker.pull.pull_group("g", "Tagged", PullOptions(tags="A", wait_ms=20_000))
    )
    await until(lambda: broker.waiters.parked == 1)
    got = await pull  # the retry comes back through the schedule topic after a second
    assert [(m.body, m.topic, m.tags) for m in got.messages] == [(b"B1", "Tagged", "B")]
    assert broker.waiters.woken == 1, "woken by the retry's arrival, not by the timeout"

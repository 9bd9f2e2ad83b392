"""Broker and services without HTTP: lifecycle, send rules, pulls, offsets persistence."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from services import (
    Broker,
    BrokerConfig,
    BrokerState,
    GetMessageStatus,
    OffsetCommit,
    OutgoingMessage,
    PullOptions,
    StoreConfig,
)
from services.errors import (
    BatchRejectedError,
    BrokerUnavailableError,
    InvalidOffsetError,
    InvalidPropertyError,
    QueueNotFoundError,
    SystemTopicError,
)
from services.send import UniqKeyGenerator, shard_queue
from storage.errors import InvalidTopicError, StoreLockedError


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not met")


SMALL = StoreConfig(commit_log_file_size=1024 * 1024, consume_queue_units_per_file=1000)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(tmp_path / "store", SMALL, offset_persist_interval_s=0.05))
    await broker.start()
    yield broker
    await broker.stop()


def test_shard_queue_matches_rocketmq() -> None:
    # Java: "order-1".hashCode() == -1207111310; -1207111310 % 8 == -6; Math.abs(-6) == 6.
    assert shard_queue("order-1", 8) == 6
    assert shard_queue("polygenelubricants", 8) == 0  # hashCode() == Integer.MIN_VALUE
    assert shard_queue("Aa", 16) == shard_queue("BB", 16) == 2112 % 16
    assert shard_queue("x", 1) == 0


def test_uniq_keys_are_32_uppercase_hex_and_distinct() -> None:
    generator = UniqKeyGenerator("10.0.0.7")
    keys = [generator.next() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) for k in keys)
    assert len(set(keys)) == 1000
    assert keys[0].startswith("0A000007")


async def test_lifecycle(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(tmp_path / "s", SMALL))
    with pytest.raises(BrokerUnavailableError):
        _ = broker.send
    await broker.start()
    assert broker.state is BrokerState.RUNNING
    assert (tmp_path / "s" / "abort").exists()
    second = Broker(BrokerConfig(tmp_path / "s", SMALL))
    with pytest.raises(StoreLockedError):
        await second.start()
    assert second.state is BrokerState.FAILED
    await broker.stop()
    assert broker.state.value == BrokerState.STOPPED.value
    assert not (tmp_path / "s" / "abort").exists()


async def test_send_rules(broker: Broker) -> None:
    send = broker.send.send
    with pytest.raises(SystemTopicError):
        await send("SCHEDULE_TOPIC_XXXX", [OutgoingMessage(b"x")])
    with pytest.raises(InvalidTopicError):
        await send("no spaces", [OutgoingMessage(b"x")])
    with pytest.raises(InvalidPropertyError):
        await send("T", [OutgoingMessage(b"x", properties={"KEYS": "k"})])
    with pytest.raises(InvalidPropertyError):
        await send("T", [OutgoingMessage(b"x", properties={"a": "b\x01c"})])
    with pytest.raises(BatchRejectedError):
        await send("T", [])
    with pytest.raises(QueueNotFoundError):
        await send("T", [OutgoingMessage(b"x", queue_id=8)])
    receipts = await send("T", [OutgoingMessage(b"a"), OutgoingMessage(b"b")], batch_queue_id=2)
    assert [(r.queue_id, r.queue_offset) for r in receipts] == [(2, 0), (2, 1)]
    assert broker.metrics.messages_in["T"] == 2


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


async def test_shutdown_answers_parked_pulls(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(tmp_path / "s", SMALL))
    await broker.start()
    await broker.send.send("S", [OutgoingMessage(b"x", queue_id=0)])
    pull = asyncio.create_task(broker.pull.pull_queue("S", 0, 1, PullOptions(wait_ms=30_000)))
    await until(lambda: broker.waiters.parked > 0)
    await broker.stop()
    assert (await pull).messages == []


async def test_group_positions_and_commits(broker: Broker) -> None:
    await broker.send.send(
        "G",
        [OutgoingMessage(b"0", queue_id=0), OutgoingMessage(b"1", queue_id=0)],
        batch_queue_id=0,
    )
    got = await broker.pull.pull_group("g", "G", PullOptions())
    assert [m.body for m in got.messages] == [b"0", b"1"]
    assert got.queues[0].next_offset == 2
    with pytest.raises(InvalidOffsetError):
        await broker.offsets.commit("g", [OffsetCommit("G", 0, 3)])
    await broker.offsets.commit("g", [OffsetCommit("G", 0, 2)])
    [lag] = broker.offsets.report("g")
    assert (lag.topic, lag.queues[0].committed_offset, lag.total_lag) == ("G", 2, 0)


async def test_offsets_are_persisted_periodically(broker: Broker) -> None:
    await broker.send.send("P", [OutgoingMessage(b"x", queue_id=0)])
    await broker.offsets.commit("pg", [OffsetCommit("P", 0, 1)])
    path = broker.config.store_dir / "config" / "consumerOffset.json"
    for _ in range(200):
        if path.exists() and "P@pg" in path.read_text():
            break
        await asyncio.sleep(0.02)
    assert json.loads(path.read_text())["offsetTable"]["P@pg"] == {"0": 1}
    assert broker.offset_persist_count >= 1

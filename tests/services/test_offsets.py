"""Consumer offsets: a group's positions, checked commits, the report, periodic persistence."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from services import (
    CONSUME_FROM_LATEST,
    Broker,
    OffsetCommit,
    OutgoingMessage,
    PullOptions,
    SendBackRequest,
    SubscriptionGroupConfig,
    retry_topic,
)
from services.errors import InvalidOffsetError
from tests.services.conftest import wait_for


async def test_group_positions_and_commits(broker: Broker) -> None:
    await broker.send.send(
        "G",
        [OutgoingMessage(b"0", queue_id=0), OutgoingMessage(b"1", queue_id=0)],
        batch_queue_id=0,
    )
    got = await broker.pull.pull_group("g", "G", PullOptions())
    assert [m.body for m in got.messages] == [b"0", b"1"]
    assert got.queues[0].next_offset == 2
    [pinned] = broker.offsets.report("g")
    assert [q.last_commit_timestamp for q in pinned.queues] == [0] * len(pinned.queues), (
        "a first read pins where the group starts: no commit yet"
    )
    with pytest.raises(InvalidOffsetError):
        await broker.offsets.commit("g", [OffsetCommit("G", 0, 3)])
    await broker.offsets.commit("g", [OffsetCommit("G", 0, 2)])
    [lag] = broker.offsets.report("g")
    assert (lag.topic, lag.queues[0].committed_offset, lag.total_lag) == ("G", 2, 0)
    assert lag.queues[0].last_commit_timestamp > 0
    assert {q.last_commit_timestamp for q in lag.queues[1:]} == {0}


async def test_offsets_are_persisted_periodically(broker: Broker) -> None:
    await broker.send.send("P", [OutgoingMessage(b"x", queue_id=0)])
    await broker.offsets.commit("pg", [OffsetCommit("P", 0, 1)])
    path = broker.config.store_dir / "config" / "consumerOffset.json"
    deadline = time.monotonic() + 30  # generous: a busy machine delays the persister thread
    while time.monotonic() < deadline:
        # The file is written in a thread; the persister counts the write once it is back.
        if broker.offset_persist_count >= 1 and path.exists() and "P@pg" in path.read_text():
            break
        await asyncio.sleep(0.02)
    assert json.loads(path.read_text())["offsetTable"]["P@pg"] == {"0": 1}
    assert broker.offset_persist_count >= 1


async def test_a_retry_counts_in_the_lag_before_the_group_reads_its_retry_topic(
    broker: Broker,
) -> None:
    """A group that starts at the latest offset still gets its retries: the retry topic
    holds nothing but them, so its queues start at their min offset, and the report counts
    them from there as soon as one waits."""
    await broker.groups.put(SubscriptionGroupConfig("late", consume_from=CONSUME_FROM_LATEST))
    [failed] = await broker.send.send("Late", [OutgoingMessage(b"x", queue_id=0)])
    assert [t.topic for t in broker.offsets.report("late")] == []
    await broker.send_back.send_back(SendBackRequest("late", msg_id=failed.msg_id, delay_level=1))
    retry = retry_topic("late")
    store = broker._store  # the test waits for the delivery the scheduler makes
    assert store is not None
    await wait_for(lambda: store.max_offset_in_queue(retry, 0) == 1)
    [waiting] = broker.offsets.report("late")
    assert waiting.topic == retry and waiting.total_lag == 1
    assert [(q.committed_offset, q.max_offset, q.lag) for q in waiting.queues] == [(0, 1, 1)]
    assert waiting.queues[0].last_commit_timestamp == 0
    assert broker.offsets.report("late", "Late") == []
    got = await broker.pull.pull_group("late", "Late", PullOptions())
    assert [(m.body, m.reconsume_times) for m in got.messages] == [(b"x", 1)]

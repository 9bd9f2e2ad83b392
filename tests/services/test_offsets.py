"""Consumer offsets: a group's positions, checked commits, the report, periodic persistence."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from services import Broker, OffsetCommit, OutgoingMessage, PullOptions
from services.errors import InvalidOffsetError


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
    deadline = time.monotonic() + 30  # generous: a busy machine delays the persister thread
    while time.monotonic() < deadline:
        # The file is written in a thread; the persister counts the write once it is back.
        if broker.offset_persist_count >= 1 and path.exists() and "P@pg" in path.read_text():
            break
        await asyncio.sleep(0.02)
    assert json.loads(path.read_text())["offsetTable"]["P@pg"] == {"0": 1}
    assert broker.offset_persist_count >= 1

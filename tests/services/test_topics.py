"""Topics: configs and queue statistics, and a store whose topics.json is gone."""

from __future__ import annotations

import shutil
from pathlib import Path

from services import Broker, BrokerConfig, OutgoingMessage, PullOptions
from storage import Message, MessageStore
from storage.record.message import GetMessageStatus
from tests.services.conftest import SMALL


async def test_a_store_without_topics_json_serves_its_queues_once_declared(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    with MessageStore.open(root, SMALL) as store:
        for i in range(5):
            store.put([Message("Old", f"m{i}".encode(), queue_id=i % 2)])
    shutil.rmtree(root / "config", ignore_errors=True)  # commitlog + consumequeue only
    assert not (root / "config" / "topics.json").exists()
    assert (root / "consumequeue" / "Old" / "1").is_dir()

    broker = Broker(BrokerConfig(root, SMALL))
    await broker.start()
    try:
        assert [c.topic_name for c in broker.topics.all() if c.topic_name == "Old"] == []
        assert broker.topics.stored_messages("Old") == 5, "the queues are kept"
        config, created = await broker.topics.put(
            "Old", read_queue_nums=2, write_queue_nums=2, perm=6
        )
        assert created
        stats = broker.topics.queue_stats(config)
        assert [(q.min_offset, q.max_offset) for q in stats] == [(0, 3), (0, 2)]
        got = await broker.pull.pull_queue("Old", 1, 0, PullOptions())
        assert (got.status, [m.body for m in got.messages]) == (
            GetMessageStatus.FOUND,
            [b"m1", b"m3"],
        )
        group = await broker.pull.pull_group("g", "Old", PullOptions())
        assert sorted(m.body for m in group.messages) == [f"m{i}".encode() for i in range(5)]
        [sent] = await broker.send.send("Old", [OutgoingMessage(b"m5", queue_id=1)])
        assert sent.queue_offset == 2, "new messages continue the old queue"
    finally:
        await broker.stop()
    assert (root / "config" / "topics.json").exists()


async def test_stored_messages_and_max_queues(broker: Broker) -> None:
    assert broker.topics.stored_messages("Nothing") == 0
    await broker.send.send("Counted", [OutgoingMessage(b"x", queue_id=q) for q in (0, 0)])
    await broker.send.send("Counted", [OutgoingMessage(b"y", queue_id=3)])
    assert broker.topics.stored_messages("Counted") == 3
    assert broker.topics.max_queues == SMALL.max_queues_per_topic

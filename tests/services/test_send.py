"""Send: queue choice as RocketMQ's client does it, client-style ids, and the rules a producer's
messages must follow — nothing is written when one is broken."""

from __future__ import annotations

import pytest

from services import Broker, OutgoingMessage
from services.errors import (
    BatchRejectedError,
    IdempotencyUnavailableError,
    InvalidPropertyError,
    QueueNotFoundError,
    SystemTopicError,
)
from services.send import shard_queue
from services.send_back import SendBackRequest
from storage.errors import InvalidTopicError
from storage.topic_names import dlq_topic, retry_topic


def test_shard_queue_matches_rocketmq() -> None:
    # Java: "order-1".hashCode() == -1207111310; -1207111310 % 8 == -6; Math.abs(-6) == 6.
    assert shard_queue("order-1", 8) == 6
    assert shard_queue("polygenelubricants", 8) == 0  # hashCode() == Integer.MIN_VALUE
    assert shard_queue("Aa", 16) == shard_queue("BB", 16) == 2112 % 16
    assert shard_queue("x", 1) == 0


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


async def test_producers_may_not_send_to_retry_or_dead_letter_topics(broker: Broker) -> None:
    [sent] = await broker.send.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
    await broker.send_back.send_back(SendBackRequest("g", msg_id=sent.msg_id, delay_level=-1))
    written = broker.store_gauges().commit_log_max_offset
    for topic in (retry_topic("g"), dlq_topic("g"), retry_topic("new"), dlq_topic("new")):
        with pytest.raises(SystemTopicError, match="retry or dead-letter topic"):
            await broker.send.send(topic, [OutgoingMessage(b"sneaky", queue_id=0)])
    assert broker.store_gauges().commit_log_max_offset == written, "nothing written"
    assert broker.topics.stored_messages(dlq_topic("g")) == 1, "send-back still puts there"
    assert [c.topic_name for c in broker.topics.all() if "new" in c.topic_name] == []


async def test_a_timed_send_answers_its_time_and_a_cancel_handle(broker: Broker) -> None:
    send = broker.send.send
    [receipt] = await send("Orders", [OutgoingMessage(b"x", deliver_after_ms=61_000)])
    assert receipt.topic == "Orders"
    assert receipt.queue_offset == -1, "its offset in the topic comes at delivery"
    assert receipt.deliver_at is not None
    # 61 s after the send, not rounded up to a delay level (120 s)
    assert abs(receipt.deliver_at - receipt.store_timestamp - 61_000) < 1000
    assert receipt.timer_handle is not None
    config = broker.topics.get("Orders")
    assert all(q.max_offset == 0 for q in broker.topics.queue_stats(config)), "not visible yet"
    with pytest.raises(InvalidPropertyError):
        await send("Orders", [OutgoingMessage(b"x", delay_level=2, deliver_at=1)])
    with pytest.raises(InvalidPropertyError):
        await send("Orders", [OutgoingMessage(b"x", deliver_at=10**13, deliver_after_ms=5)])
    with pytest.raises(InvalidPropertyError):
        await send("Orders", [OutgoingMessage(b"x", properties={"TIMER_OUT_MS": "1"})])
    with pytest.raises(BatchRejectedError, match="as a whole"):
        await send("Orders", [OutgoingMessage(b"a", deliver_after_ms=5000), OutgoingMessage(b"b")])
    batch = await send(
        "Orders",
        [
            OutgoingMessage(b"a", deliver_after_ms=5000),
            OutgoingMessage(b"b", deliver_after_ms=9000),
        ],
    )
    assert [r.queue_offset for r in batch] == [-1, -1]
    assert len({r.timer_handle for r in batch}) == 2


async def test_a_keyed_send_without_idempotency_is_refused_and_stores_nothing(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(broker.send, "_idempotency", None)
    end = broker.replica.status().max_physical_offset
    for messages in ([OutgoingMessage(b"x", queue_id=0)], [OutgoingMessage(b"a")] * 2):
        with pytest.raises(IdempotencyUnavailableError):
            await broker.send.send("T", messages, idempotency_key="order-1")
    assert broker.replica.status().max_physical_offset == end
    assert broker.metrics.messages_in["T"] == 0

"""Send: queue choice as RocketMQ's client does it, client-style ids, and the rules a producer's
messages must follow — nothing is written when one is broken."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import services.send
import storage.message_store
from services import Broker, OutgoingMessage
from services.errors import (
    BatchRejectedError,
    IdempotencyKeyReusedError,
    IdempotencyUnavailableError,
    InvalidPropertyError,
    QueueNotFoundError,
    SystemTopicError,
)
from services.send import shard_queue
from services.send_back import SendBackRequest
from services.send_payload import plain
from storage.errors import InvalidTopicError
from storage.topic_names import dlq_topic, retry_topic
from tests.services.twin_brokers import commit_log_of, running_twins, start_twin, stop_clocks


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


async def test_a_single_send_goes_round_robin_over_the_write_queues(broker: Broker) -> None:
    sent = [await broker.send.send("Orders", [OutgoingMessage(b"x")]) for _ in range(10)]
    queues = [receipt.queue_id for [receipt] in sent]
    count = broker.topics.get("Orders").write_queue_nums
    assert queues == [i % count for i in range(10)]
    [named] = await broker.send.send("Orders", [OutgoingMessage(b"y", queue_id=count - 1)])
    assert (named.queue_id, named.queue_offset) == (count - 1, 10 // count)


def test_a_repeat_replays_the_receipts_and_another_payload_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        broker = await start_twin(tmp_path / "store")
        try:
            batch = [OutgoingMessage(b"a"), OutgoingMessage(b"b")]
            first = await broker.send.send("T", batch, idempotency_key="k")
            assert not first.replayed
            again = await broker.send.send("T", batch, idempotency_key="k")
            assert again.replayed and [r.replayed for r in again] == [True, True]
            assert [r.msg_id for r in again] == [r.msg_id for r in first]
            assert [r.uniq_key for r in again] == [r.uniq_key for r in first]
            other = [OutgoingMessage(b"a"), OutgoingMessage(b"c")]
            with pytest.raises(IdempotencyKeyReusedError):
                await broker.send.send("T", other, idempotency_key="k")
        finally:
            await broker.stop()

    asyncio.run(scenario())


def _never(*_: object) -> Any:
    return None


def _message(**extras: st.SearchStrategy[Any]) -> st.SearchStrategy[OutgoingMessage]:
    """Messages with exactly the fields given drawn, every other one at its default."""
    return st.builds(
        lambda **fields: OutgoingMessage(**fields), body=st.binary(max_size=48), **extras
    )


PLAIN = _message()
MESSAGES = _message(
    tags=st.one_of(st.none(), st.sampled_from(["TagA", "é"])),
    keys=st.one_of(st.just(()), st.sampled_from([("k1",), ("k1", "k2")])),
    properties=st.one_of(st.just({}), st.sampled_from([{"color": "red"}, {"UNIQ_KEY": "mine"}])),
    queue_id=st.sampled_from([None, None, None, 1]),
    deliver_after_ms=st.sampled_from([None, None, None, 3_600_000]),
)
SENDS = st.tuples(
    st.sampled_from(["T", "U"]),
    st.lists(st.one_of(PLAIN, PLAIN, PLAIN, MESSAGES), min_size=1, max_size=5),
    st.one_of(st.none(), st.integers(0, 3)),
    st.one_of(st.none(), st.just("order-1")),
    st.sampled_from([None, None, "key-a", "key-b", "key-c", "key-d"]),
)


async def _answer(broker: Broker, send: tuple[Any, ...]) -> object:
    topic, messages, queue_id, sharding_key, key = send
    try:
        sent = await broker.send.send(
            topic,
            messages,
            batch_queue_id=queue_id,
            batch_sharding_key=sharding_key,
            idempotency_key=key,
        )
    except Exception as exc:  # the refusal itself is compared
        return (type(exc), str(exc))
    return list(sent)


def test_plain_sends_put_as_uniform_messages_store_and_answer_what_the_general_rules_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two brokers on real stores take the same sends: one as the code runs (plain messages
    put as :class:`~storage.UniformMessages`, encoded as a uniform batch), one with every send
    taken as more than plain and every batch encoded by the general rules, both with the same
    clock and UNIQ_KEYs; every answer and every byte of the two CommitLogs must be the same."""
    stop_clocks(monkeypatch)
    general_root, uniform_root = tmp_path / "general", tmp_path / "uniform"
    with running_twins(general_root, uniform_root) as (runner, general, uniform):
        plain_sends: list[bool] = []

        @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(SENDS)
        def same(send: tuple[Any, ...]) -> None:
            with monkeypatch.context() as forced:
                forced.setattr(services.send, "plain", _never)
                forced.setattr(storage.message_store, "uniform_batch", _never)
                expected = runner.run(_answer(general, send))
            plain_sends.append(plain(send[1]))
            assert runner.run(_answer(uniform, send)) == expected

        same()
        assert commit_log_of(uniform_root) == commit_log_of(general_root)
        assert any(plain_sends) and not all(plain_sends)

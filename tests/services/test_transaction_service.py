"""Transactions without HTTP: the records as RocketMQ lays them out, op records batched, and
state rebuilt from the CommitLog after a restart, including a commit whose op record was lost."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, OutgoingMessage, TransactionConfig
from services.errors import TransactionEndedError, TransactionEndUnreplicatedError
from services.transaction import TransactionState
from services.transaction.records import half_message, op_offsets, real_message
from storage import Message, MessageStore, PutResult, PutStatus, StoredMessage
from storage.record.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK
from storage.topic_names import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from tests.services.conftest import SMALL, wait_for

NEVER = TransactionConfig(timeout_ms=600_000, check_interval_ms=600_000)
"""No check-back during the test unless it asks for one."""


def config(root: Path, transactions: TransactionConfig = NEVER) -> BrokerConfig:
    return BrokerConfig(root / "store", SMALL, transactions=transactions)


async def started(root: Path, transactions: TransactionConfig = NEVER) -> Broker:
    broker = Broker(config(root, transactions))
    await broker.start()
    return broker


def records(store: MessageStore, topic: str) -> list[StoredMessage]:
    return store.get_message("test", topic, 0, 0, 10_000).messages


def store_of(broker: Broker) -> MessageStore:
    store = broker._store  # the test reads the bytes the services wrote
    assert store is not None
    return store


async def test_half_and_committed_records_carry_rocketmq_fields(tmp_path: Path) -> None:
    broker = await started(tmp_path)
    try:
        service = broker.transactions
        prepared = await service.prepare(
            "Orders", OutgoingMessage(b"paid", tags="t", properties={"a": "1"}), "pg"
        )
        store = store_of(broker)
        (half,) = records(store, TRANS_HALF_TOPIC)
        assert half.sys_flag & TRANSACTION_TYPE_MASK == 0
        properties = half.properties
        assert properties["TRAN_MSG"] == "true" and properties["PGROUP"] == "pg"
        assert properties["REAL_TOPIC"] == "Orders"
        assert properties["REAL_QID"] == str(prepared.transaction.queue_id)
        assert properties["__transactionId__"] == properties["UNIQ_KEY"]
        assert store.max_offset_in_queue("Orders", prepared.transaction.queue_id) == 0

        ended = await service.end(prepared.transaction.transaction_id, "pg", commit=True)
        assert ended.message is not None
        real = store.look_message_by_offset(ended.message.physical_offset)
        assert real is not None and real.topic == "Orders"
        assert real.sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE
        assert real.prepared_transaction_offset == half.physical_offset
        assert real.store_timestamp == half.store_timestamp
        assert real.properties["PGROUP"] == "pg" and real.properties["a"] == "1"
        assert not {"TRAN_MSG", "REAL_TOPIC", "REAL_QID"} & set(real.properties)
        (op,) = records(store, TRANS_OP_HALF_TOPIC)
        assert op.tags == "d" and op.body == f"{half.queue_offset},".encode()
        assert op.properties["TRAN_END"] == "COMMIT"
    finally:
        await broker.stop()


async def test_concurrent_ends_share_op_records_of_bounded_size(tmp_path: Path) -> None:
    transactions = dataclasses.replace(NEVER, op_max_size=64)
    broker = await started(tmp_path, transactions)
    try:
        service = broker.transactions
        prepared = [await service.prepare("Orders", OutgoingMessage(b"x"), "pg") for _ in range(60)]
        await asyncio.gather(
            *(
                service.end(p.transaction.transaction_id, "pg", commit=n % 2 == 0)
                for n, p in enumerate(prepared)
            )
        )
        ops = records(store_of(broker), TRANS_OP_HALF_TOPIC)
        assert 2 < len(ops) < 60  # batched, and no record beyond 64 bytes of offsets
        assert all(len(op.body) <= 64 for op in ops)
        ended = {o: op.properties["TRAN_END"] for op in ops for o in op_offsets(op)}
        assert ended == {
            p.transaction.half_offset: "COMMIT" if n % 2 == 0 else "ROLLBACK"
            for n, p in enumerate(prepared)
        }
    finally:
        await broker.stop()
    broker = await started(tmp_path, transactions)
    try:
        states = [broker.transactions.transaction(p.transaction.transaction_id) for p in prepared]
        assert [s.state for s in states] == [
            TransactionState.COMMITTED if n % 2 == 0 else TransactionState.ROLLED_BACK
            for n in range(60)
        ]
    finally:
        await broker.stop()


async def test_a_commit_whose_op_record_was_lost_is_found_after_a_restart(
    tmp_path: Path,
) -> None:
    broker = await started(tmp_path)
    try:
        service = broker.transactions
        ids = []
        for _ in range(2):
            prepared = await service.prepare("Orders", OutgoingMessage(b"x"), "pg")
            transaction = prepared.transaction
            ids.append(transaction.transaction_id)
            half = store_of(broker).look_message_by_offset(transaction.commit_log_offset)
            assert half is not None
            # The commit's put, then a crash before its op record: put the copy alone.
            real = real_message(half, transaction.commit_log_offset, transaction.store_timestamp)
            await broker.services.idempotency.reput(
                real, half, since_ms=transaction.store_timestamp
            )
    finally:
        await broker.stop()
    broker = await started(tmp_path)
    try:
        service = broker.transactions
        first, second = (service.transaction(i) for i in ids)
        assert first.state is second.state is TransactionState.OPEN  # no op record
        with pytest.raises(TransactionEndedError):
            await service.end(first.transaction_id, "pg", commit=False)
        assert service.transaction(ids[0]).state is TransactionState.COMMITTED
        again = await service.end(first.transaction_id, "pg", commit=True)
        assert again.repeated
        await service.check(second)  # the check repairs it instead of asking the producer
        repaired = service.transaction(ids[1])
        assert repaired.state is TransactionState.COMMITTED and repaired.checks == 0
        queue = first.queue_id, second.queue_id
        store = store_of(broker)
        assert sum(store.max_offset_in_queue("Orders", q) for q in set(queue)) == 2
    finally:
        await broker.stop()


async def test_the_check_count_and_schedule_survive_a_restart(tmp_path: Path) -> None:
    transactions = TransactionConfig(timeout_ms=1, check_interval_ms=600_000, check_max=3)
    broker = await started(tmp_path, transactions)
    try:
        prepared = await broker.transactions.prepare("Orders", OutgoingMessage(b"x"), "pg")
        transaction = prepared.transaction
        await wait_for(lambda: transaction.checks == 1)
        last_check = transaction.last_check_ms
    finally:
        await broker.stop()
    broker = await started(tmp_path, transactions)
    try:
        found = broker.transactions.transaction(transaction.transaction_id)
        assert found.checks == 1 and found.last_check_ms == last_check
        assert found.next_check_ms(600_000) == last_check + 600_000
        copies = records(store_of(broker), TRANS_HALF_TOPIC)
        assert [c.properties.get("TRANSACTION_CHECK_TIMES") for c in copies] == [None, "1"]
        assert copies[1].properties["TRAN_PREPARED_QUEUE_OFFSET"] == str(found.half_offset)
    finally:
        await broker.stop()


async def test_a_commit_retried_after_its_op_record_failed_stores_one_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = await started(tmp_path)
    try:
        service = broker.transactions
        prepared = await service.prepare("Orders", OutgoingMessage(b"x"), "pg")
        transaction_id = prepared.transaction.transaction_id
        writes = service.ops._put  # the op record's put fails once, after the commit's put

        async def refused(messages: list[Message]) -> list[PutResult]:
            raise OSError("no space left for the op record")

        monkeypatch.setattr(service.ops, "_put", refused)
        with pytest.raises(OSError):
            await service.end(transaction_id, "pg", commit=True)
        monkeypatch.setattr(service.ops, "_put", writes)
        assert service.transaction(transaction_id).state is TransactionState.OPEN

        again = await service.end(transaction_id, "pg", commit=True)
        assert again.repeated and again.message is not None
        assert service.transaction(transaction_id).state is TransactionState.COMMITTED
        store = store_of(broker)
        queue_id = prepared.transaction.queue_id
        assert store.max_offset_in_queue("Orders", queue_id) == 1  # the first put's copy only
        (real,) = records_of(store, "Orders", queue_id)
        assert real.physical_offset == again.message.physical_offset
        assert (
            real.body == b"x" and real.prepared_transaction_offset == prepared.half.physical_offset
        )
    finally:
        await broker.stop()


def records_of(store: MessageStore, topic: str, queue_id: int) -> list[StoredMessage]:
    return store.get_message("test", topic, queue_id, 0, 10_000).messages


@pytest.mark.parametrize(
    ("asked", "kept", "restored"),
    [
        ({"deliver_after_ms": 1500}, "TRAN_TIMER_DELAY_MS", "TIMER_DELAY_MS"),
        ({"deliver_at": 1_900_000_000_000}, "TRAN_TIMER_DELIVER_MS", "TIMER_DELIVER_MS"),
    ],
)
def test_a_delivery_time_rides_the_half_untimed_and_times_the_commit(
    asked: dict[str, int], kept: str, restored: str
) -> None:
    built = Message("Orders", b"x", queue_id=3, properties={"UNIQ_KEY": "U1"})
    half = half_message(built, "pg", **asked)
    value = str(next(iter(asked.values())))
    assert half.properties[kept] == value
    assert not any(name.startswith("TIMER_") for name in half.properties)
    real = real_message(half, 4096, 1234)
    assert real.properties[restored] == value
    assert not any(name.startswith("TRAN_") for name in real.properties)
    assert (real.topic, real.queue_id) == ("Orders", 3)
    assert real.store_timestamp == 0  # stored at the commit: the time counts from there


async def test_an_end_no_successor_could_have_is_undecided_until_a_replica_has_it(
    tmp_path: Path,
) -> None:
    """A sync master without its slave stores an end alone (SLAVE_NOT_AVAILABLE). Where a
    successor that never saw it could be elected, the end is refused undecided: the same end
    retried writes its op record again, the other way is refused, and once a put survives a
    failover the retry is answered — one committed message."""
    broker = Broker(
        dataclasses.replace(config(tmp_path), ha_listen="127.0.0.1:0", replication="sync")
    )
    await broker.start()
    try:
        service = broker.transactions
        decided = False
        service.survives_failover = lambda status: decided or status is PutStatus.PUT_OK
        prepared = await service.prepare("Orders", OutgoingMessage(b"x"), "pg")
        transaction_id = prepared.transaction.transaction_id
        for _ in range(2):
            with pytest.raises(TransactionEndUnreplicatedError, match="SLAVE_NOT_AVAILABLE"):
                await service.end(transaction_id, "pg", commit=True)
        with pytest.raises(TransactionEndedError):
            await service.end(transaction_id, "pg", commit=False)
        store = store_of(broker)
        assert len(records(store, TRANS_OP_HALF_TOPIC)) == 2

        decided = True  # the in-sync set without the slave reached etcd, say
        again = await service.end(transaction_id, "pg", commit=True)
        assert again.repeated and again.message is not None
        assert store.max_offset_in_queue("Orders", prepared.transaction.queue_id) == 1
        assert not service.transaction(transaction_id).undecided
        assert (await service.end(transaction_id, "pg", commit=True)).repeated
        assert len(records(store, TRANS_OP_HALF_TOPIC)) == 3  # decided: nothing written
    finally:
        await broker.stop()

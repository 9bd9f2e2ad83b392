"""Transactional producers over the gRPC face, driven by the official client's Transaction and
TransactionChecker: commit, rollback, and a check answered by a restarted producer's checker.

The server checks an open transaction 1 s after its half send, then every 2 s (a test waits
for what it expects, so a busy machine only makes it slower).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from rocketmq import (  # type: ignore[import-untyped]
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2,
    service_pb2,
)

from tests.app.grpc.support import (
    DEADLINE_S,
    Face,
    consumer_of,
    message,
    receive_all,
    resource,
    serving,
    stub,
)

UNKNOWN = TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED
"""The Python client's UNKNOWN: not known yet, ask again later."""


class RecordingChecker(TransactionChecker):  # type: ignore[misc]
    """Answers every check with ``resolution`` and keeps the messages it was asked about."""

    def __init__(self, resolution: int = UNKNOWN) -> None:
        self.resolution = resolution
        self.lock = threading.Lock()
        self.checked: list[Message] = []

    def check(self, message: Message) -> int:
        with self.lock:
            self.checked.append(message)
        return self.resolution


@pytest.fixture(scope="module")
def face(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Face]:
    store = tmp_path_factory.mktemp("grpc-transactions") / "store"
    checks = ("--transaction-timeout-ms", "1000", "--transaction-check-interval-ms", "2000")
    with serving(store, *checks) as face:
        yield face


def producer_of(face: Face, topic: str, checker: TransactionChecker) -> Producer:
    producer = Producer(face.config(), (topic,), checker)
    producer.startup()
    return producer


def state_of(face: Face, transaction_id: str) -> str:
    state: str = face.http.get(f"/v1/transactions/{transaction_id}").json()["state"]
    return state


def test_a_committed_transaction_is_delivered_once_and_not_before(face: Face) -> None:
    topic = face.topic("grpc-tx-commit", queues=1)
    checker = RecordingChecker()  # asked while the test waits: it does not know yet
    producer = producer_of(face, topic, checker)
    consumer = consumer_of(face, "grpc-tx-commit-workers", topic)
    try:
        transaction = producer.begin_transaction()
        receipt = producer.send(message(topic, b"paid", keys="order-7"), transaction)
        assert receipt.transaction_id == receipt.message_id
        assert consumer.receive(16, 30) == []  # a half message is invisible
        transaction.commit()
        [received] = receive_all(consumer, 1)
        assert (received.body, received.message_id) == (b"paid", receipt.message_id)
        assert received.keys == {"order-7"}
        assert state_of(face, receipt.transaction_id) == "committed"
        assert consumer.receive(16, 30) == []  # once
    finally:
        consumer.shutdown()
        producer.shutdown()


def test_a_rolled_back_transaction_is_never_delivered(face: Face) -> None:
    topic = face.topic("grpc-tx-rollback", queues=1)
    producer = producer_of(face, topic, RecordingChecker())
    consumer = consumer_of(face, "grpc-tx-rollback-workers", topic)
    try:
        transaction = producer.begin_transaction()
        receipt = producer.send(message(topic, b"cancelled"), transaction)
        transaction.rollback()
        assert state_of(face, receipt.transaction_id) == "rolled_back"
        producer.send(message(topic, b"after"))
        assert [m.body for m in receive_all(consumer, 1)] == [b"after"]
        assert consumer.receive(16, 30) == []
    finally:
        consumer.shutdown()
        producer.shutdown()


def test_an_orphaned_transaction_is_committed_by_the_checker_of_a_restarted_producer(
    face: Face,
) -> None:
    topic = face.topic("grpc-tx-check", queues=1)
    first = producer_of(face, topic, RecordingChecker())
    try:
        receipt = first.send(message(topic, b"orphan", tag="t"), first.begin_transaction())
    finally:
        first.shutdown()  # gone before its local transaction ended
    checker = RecordingChecker(TransactionResolution.COMMIT)
    restarted = producer_of(face, topic, checker)
    consumer = consumer_of(face, "grpc-tx-check-workers", topic)
    try:
        [received] = receive_all(consumer, 1)
    finally:
        consumer.shutdown()
        restarted.shutdown()
    assert (received.body, received.message_id) == (b"orphan", receipt.message_id)
    asked = checker.checked[0]
    assert (asked.topic, asked.body, asked.tag) == (topic, b"orphan", "t")
    assert asked.message_id == receipt.message_id
    assert state_of(face, receipt.transaction_id) == "committed"


def test_a_check_the_checker_rolls_back_ends_the_transaction(face: Face) -> None:
    topic = face.topic("grpc-tx-check-rollback", queues=1)
    checker = RecordingChecker(TransactionResolution.ROLLBACK)
    producer = producer_of(face, topic, checker)
    try:
        receipt = producer.send(message(topic, b"unsure"), producer.begin_transaction())
        deadline = time.monotonic() + DEADLINE_S
        while state_of(face, receipt.transaction_id) == "open" and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        producer.shutdown()
    assert state_of(face, receipt.transaction_id) == "rolled_back"
    assert {m.message_id for m in checker.checked} == {receipt.message_id}


def test_an_end_answers_as_rocketmqs_proxy(face: Face) -> None:
    topic = face.topic("grpc-tx-codes", queues=1)
    with stub(face) as calls:
        unknown = calls.EndTransaction(
            service_pb2.EndTransactionRequest(
                topic=resource(topic),
                message_id="nobody",
                transaction_id="nobody",
                resolution=definition_pb2.TransactionResolution.COMMIT,
                source=definition_pb2.TransactionSource.SOURCE_CLIENT,
            )
        )
        unresolved = calls.EndTransaction(
            service_pb2.EndTransactionRequest(
                topic=resource(topic), transaction_id="nobody", resolution=7
            )
        )
    assert unknown.status.code == definition_pb2.Code.INVALID_TRANSACTION_ID
    assert unresolved.status.code == definition_pb2.Code.BAD_REQUEST

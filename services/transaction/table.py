"""What the broker knows of every transaction, rebuilt from the CommitLog on start.

The half topic, the op topic and the check-max topic are the truth; this table is their
reading. :func:`rebuild` replays them in that order:

- an original half opens a transaction (keyed by its half queue offset);
- a check copy raises its check count and its last check time;
- an op record ends its halves, committed or rolled back;
- a check-max copy marks an open transaction given up (no more checks; an operator may
  still commit or roll it back).

A commit whose op record a crash lost is found when it matters, by its copy in the real
topic (:meth:`services.transaction.service.TransactionService` looks before answering and
before checking).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Final

from services.transaction.records import (
    CHECK_MAX_QUEUE_ID,
    END_COMMIT,
    HALF_QUEUE_ID,
    OP_QUEUE_ID,
    TRANSACTION_GROUP,
    check_times,
    op_end,
    op_offsets,
    origin_offset,
    original_offset,
)
from storage import Message, MessageStore, PutResult, StoredMessage
from storage.record.msg_id import msg_id_prefix
from storage.record.properties import (
    PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
)
from storage.topic_names import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

_BATCH: Final = 256


class TransactionState(Enum):
    OPEN = "open"
    GAVE_UP = "gave_up"  # checked check_max times; in TRANS_CHECK_MAX_TIME_TOPIC
    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"

    @property
    def ended(self) -> bool:
        return self in (TransactionState.COMMITTED, TransactionState.ROLLED_BACK)


@dataclass(slots=True)
class Transaction:
    """One half message and what became of it."""

    transaction_id: str
    producer_group: str
    topic: str  # the real topic
    queue_id: int  # the real queue
    half_offset: int  # queue offset of the original half in the half topic
    commit_log_offset: int  # of the original half
    half_msg_id: str  # of the original half
    store_timestamp: int  # of the original half
    immunity_ms: int  # no check before store_timestamp + this
    checks: int = 0
    last_check_ms: int = 0  # store time of the latest check copy; 0 before the first check
    state: TransactionState = TransactionState.OPEN
    undecided: bool = False  # ended here; no broker that could succeed this one has it yet

    @property
    def open(self) -> bool:
        return self.state is TransactionState.OPEN

    def next_check_ms(self, interval_ms: int) -> int:
        """When it is checked next: ``immunity`` after the send, then every ``interval``."""
        if self.last_check_ms:
            return self.last_check_ms + interval_ms
        return self.store_timestamp + self.immunity_ms


class TransactionTable:
    """Transactions by half offset and by id (the event loop's)."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.by_offset: dict[int, Transaction] = {}
        self.by_id: dict[str, Transaction] = {}
        self._unresolved: dict[int, Transaction] = {}  # open or given up, oldest first

    def __len__(self) -> int:
        return len(self.by_offset)

    def get(self, transaction_id: str) -> Transaction | None:
        return self.by_id.get(transaction_id)

    def open_transactions(self) -> Iterator[Transaction]:
        """Transactions still waiting for an end, open or given up, oldest first."""
        return iter(self._unresolved.values())

    def add_half(self, half: StoredMessage) -> Transaction | None:
        """Open the transaction of an original half, or count a check copy's check."""
        if PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET in half.properties:
            found = self.by_offset.get(original_offset(half))
            if found is None:  # the original expired: the copy stands in for it
                found = self._open(half)
            found.checks = max(found.checks, check_times(half))
            found.last_check_ms = max(found.last_check_ms, half.store_timestamp)
            return found
        if half.queue_offset in self.by_offset:
            return self.by_offset[half.queue_offset]
        return self._open(half)

    def add_prepared(self, half: Message, result: PutResult) -> Transaction:
        """Open the transaction of a half message this broker just stored."""
        properties = half.properties
        return self._add(
            Transaction(
                transaction_id=properties[PROPERTY_TRANSACTION_ID],
                producer_group=properties[PROPERTY_PRODUCER_GROUP],
                topic=properties[PROPERTY_REAL_TOPIC],
                queue_id=int(properties[PROPERTY_REAL_QID]),
                half_offset=result.queue_offset,
                commit_log_offset=result.physical_offset,
                half_msg_id=result.msg_id,
                store_timestamp=result.store_timestamp,
                immunity_ms=immunity_ms(properties, self.timeout_ms),
            )
        )

    def _add(self, transaction: Transaction) -> Transaction:
        self.by_offset[transaction.half_offset] = transaction
        self.by_id[transaction.transaction_id] = transaction
        self._unresolved[transaction.half_offset] = transaction
        return transaction

    def _open(self, half: StoredMessage) -> Transaction:
        properties = half.properties
        origin = origin_offset(half)
        transaction = Transaction(
            transaction_id=properties.get(PROPERTY_TRANSACTION_ID, ""),
            producer_group=properties.get(PROPERTY_PRODUCER_GROUP, ""),
            topic=properties.get(PROPERTY_REAL_TOPIC, ""),
            queue_id=int(properties.get(PROPERTY_REAL_QID, "0")),
            half_offset=original_offset(half),
            commit_log_offset=origin,
            half_msg_id=msg_id_prefix(*half.store_host) + f"{origin:016X}",
            store_timestamp=half.store_timestamp,
            immunity_ms=immunity_ms(properties, self.timeout_ms),
        )
        return self._add(transaction)

    def end(self, half_offset: int, committed: bool) -> None:
        found = self.by_offset.get(half_offset)
        if found is not None and not found.state.ended:
            found.state = TransactionState.COMMITTED if committed else TransactionState.ROLLED_BACK
            self._unresolved.pop(half_offset, None)

    def give_up(self, half_offset: int) -> None:
        found = self.by_offset.get(half_offset)
        if found is not None and found.open:
            found.state = TransactionState.GAVE_UP


def immunity_ms(properties: dict[str, str], timeout_ms: int) -> int:
    """``CHECK_IMMUNITY_TIME_IN_SECONDS`` in ms, never below the transaction timeout."""
    value = properties.get(PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS, "")
    return max(timeout_ms, int(value) * 1000) if value.isdigit() else timeout_ms


def rebuild(store: MessageStore, table: TransactionTable) -> int:
    """Fill ``table`` from the three transaction topics; returns how many records it read."""
    read = 0
    for half in _records(store, TRANS_HALF_TOPIC, HALF_QUEUE_ID):
        table.add_half(half)
        read += 1
    for op in _records(store, TRANS_OP_HALF_TOPIC, OP_QUEUE_ID):
        committed = op_end(op) == END_COMMIT
        for offset in op_offsets(op):
            table.end(offset, committed)
        read += 1
    for copy in _records(store, TRANS_CHECK_MAX_TIME_TOPIC, CHECK_MAX_QUEUE_ID):
        table.give_up(original_offset(copy))
        read += 1
    return read


def _records(store: MessageStore, topic: str, queue_id: int) -> Iterator[StoredMessage]:
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        result = store.get_message(TRANSACTION_GROUP, topic, queue_id, offset, _BATCH)
        yield from result.messages
        if result.next_begin_offset <= offset:
            return
        offset = result.next_begin_offset

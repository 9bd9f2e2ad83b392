"""Rebuild the in-flight table on start: read the revive topic from the last snapshot.

Every CK after the snapshot's revive offset puts its offsets in flight (with its CK id,
deadline and attempt); every ACK after it takes them out again; a RESET restarts the queues it
names (an offset reset) or drops the group (a delete), undoing the CKs before it. What is left
is exactly what was taken and not done when the broker stopped (or crashed): it comes back at
its deadline, which may already have passed. Pop offsets resume after the highest offset any
CK took since the queue's last reset.
"""

from __future__ import annotations

from services.pop.checkpoint import (
    PROPERTY_POP_CK,
    REVIVE_GROUP,
    REVIVE_QUEUE_ID,
    REVIVE_TOPIC,
    AckRecord,
    CheckPoint,
    ResetRecord,
    decode_record,
    parse_pop_ck,
)
from services.pop.inflight import InFlight, InFlightTable
from services.pop.state_file import PopSnapshot
from storage import MessageStore
from storage.topic_names import retry_topic

_BATCH = 256


def rebuild(store: MessageStore, snapshot: PopSnapshot, table: InFlightTable) -> int:
    """Fill ``table``; returns how many revive records were read."""
    for key, offset in snapshot.committed.items():
        table.ensure(key, offset)
    offset = max(snapshot.revive_offset, store.min_offset_in_queue(REVIVE_TOPIC, REVIVE_QUEUE_ID))
    read = 0
    while True:
        result = store.get_message(REVIVE_GROUP, REVIVE_TOPIC, REVIVE_QUEUE_ID, offset, _BATCH)
        for message in result.messages:
            record = decode_record(message)
            if isinstance(record, CheckPoint):
                _apply_checkpoint(table, record, message.queue_offset)
            elif isinstance(record, AckRecord):
                _apply_ack(table, record)
            elif isinstance(record, ResetRecord):
                _apply_reset(table, record)
        read += len(result.messages)
        if result.next_begin_offset <= offset:
            break
        offset = result.next_begin_offset
    for group in {key[0] for key, state in table.queues.items() if state.entries}:
        _drop_revived(store, snapshot, table, group)
    return read


def _drop_revived(
    store: MessageStore, snapshot: PopSnapshot, table: InFlightTable, group: str
) -> None:
    """Take out of flight what already has a copy in ``%RETRY%<group>`` (the revive's ACK
    record was lost in a crash right after the copy). Copies made before the snapshot were
    acked in the log already, so the scan starts at the snapshot's committed offsets."""
    topic = retry_topic(group)
    for queue_id in store.queue_ids(topic):
        offset = max(
            snapshot.committed.get((group, topic, queue_id), 0),
            store.min_offset_in_queue(topic, queue_id),
        )
        while True:
            result = store.get_message(REVIVE_GROUP, topic, queue_id, offset, _BATCH)
            for message in result.messages:
                revived = parse_pop_ck(message.properties.get(PROPERTY_POP_CK, ""))
                if revived is not None:
                    original, original_queue, original_offset, ck_id = revived
                    table.resolve((group, original, original_queue), original_offset, ck_id)
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset


def _apply_checkpoint(table: InFlightTable, ck: CheckPoint, revive_offset: int) -> None:
    key = (ck.group, ck.topic, ck.queue_id)
    table.ensure(key, min(ck.offsets, default=0))
    # An ACK always follows its CK in the log, so what was done is taken out again below.
    for offset, attempt in zip(ck.offsets, ck.attempts, strict=False):
        table.put(
            key,
            InFlight(
                offset=offset,
                ck_id=ck.ck_id,
                deadline_ms=ck.deadline_ms,
                attempt=attempt,
                floor=revive_offset,
                pop_time_ms=ck.pop_time_ms,
                holder=ck.holder,
            ),
        )


def _apply_ack(table: InFlightTable, ack: AckRecord) -> None:
    key = (ack.group, ack.topic, ack.queue_id)
    for offset in ack.offsets:
        table.resolve(key, offset, ack.ck_id)
        if ack.reason == "ack":
            table.remember_ack(ack.ck_id, offset)
        elif ack.reason in ("change", "nack"):
            table.remember_replaced(ack.ck_id, offset)


def _apply_reset(table: InFlightTable, reset: ResetRecord) -> None:
    if reset.deleted:
        table.forget(reset.group)
        return
    for topic, queue_id, offset in reset.positions:
        table.restart((reset.group, topic, queue_id), offset)

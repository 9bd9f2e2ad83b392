"""``check()``: a consistency report of an open store, for tests and post-mortems.

Every ConsumeQueue unit must point at a valid record of its own queue and offset, queue
offsets must be dense, the CommitLog's next-offset table must agree with each queue's max
offset, and the checkpoint's times must be plausible. With ``fix`` a queue is cut at its
first bad unit.
"""

from __future__ import annotations

import time

from storage.checkpoint import StoreCheckpoint
from storage.commit_log import CommitLog
from storage.consume_queue import ConsumeQueue, is_readable_unit
from storage.consume_queue_table import ConsumeQueueTable
from storage.record.decode import RecordKind, check_record, decode_record


def check_store(
    commit_log: CommitLog,
    table: ConsumeQueueTable,
    checkpoint: StoreCheckpoint | None,
    fix: bool = False,
) -> list[str]:
    """Problems found (empty when healthy)."""
    problems: list[str] = []
    min_physical = commit_log.min_offset
    for queue in table:
        problems.extend(_check_queue(commit_log, queue, min_physical, fix))
    if checkpoint is not None:
        problems.extend(_check_checkpoint(checkpoint))
    return problems


def _check_queue(
    commit_log: CommitLog, queue: ConsumeQueue, min_physical: int, fix: bool
) -> list[str]:
    problems: list[str] = []
    name = f"{queue.topic}/{queue.queue_id}"
    for index in range(queue.min_offset, queue.max_offset):
        unit = queue.get_unit(index)
        if unit is None:
            problems.append(f"consumequeue {name}: unit {index} is unreadable")
            break
        physical, size, _ = unit
        if not is_readable_unit(physical, size, min_physical):
            continue
        problem = _check_unit(commit_log, queue, index, physical, size)
        if problem:
            problems.append(f"consumequeue {name}: unit {index} {problem}")
            if fix:
                queue.truncate_dirty(physical)
            break
    next_offset = commit_log.topic_queue_table.get((queue.topic, queue.queue_id), 0)
    if next_offset != queue.max_offset:
        problems.append(
            f"consumequeue {name}: next queue offset {next_offset} != max offset {queue.max_offset}"
        )
    return problems


def _check_unit(
    commit_log: CommitLog, queue: ConsumeQueue, index: int, physical: int, size: int
) -> str:
    data = commit_log.read(physical, size)
    if data is None:
        return f"points at {physical}+{size}, beyond the CommitLog"
    check = check_record(data, 0, size, check_crc=True)
    if check.kind is not RecordKind.MESSAGE or check.size != size:
        reason = check.reason or check.kind.value
        return f"points at {physical}, which is not a valid record ({reason})"
    record = decode_record(data)
    if (record.topic, record.queue_id, record.queue_offset) != (
        queue.topic,
        queue.queue_id,
        index,
    ):
        return (
            f"points at a record of {record.topic}/{record.queue_id} offset {record.queue_offset}"
        )
    return ""


def _check_checkpoint(checkpoint: StoreCheckpoint) -> list[str]:
    now = time.time_ns() // 1_000_000 + 60_000
    problems = []
    for name, value in (
        ("physicMsgTimestamp", checkpoint.physic_msg_timestamp),
        ("logicsMsgTimestamp", checkpoint.logics_msg_timestamp),
        ("indexMsgTimestamp", checkpoint.index_msg_timestamp),
    ):
        if value < 0 or value > now:
            problems.append(f"checkpoint {name} {value} is not a plausible time")
    return problems

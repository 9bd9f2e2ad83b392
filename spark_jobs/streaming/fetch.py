"""Reading one queue range over HTTP into Arrow record batches (runs on the executors).

A range [start, end) was fixed by the driver and may be read again after a failure, so
the loop reads exactly it: pulls never ask past ``end`` and drop what lies beyond. What a
pull says about the offsets decides the rest:

- FOUND / NO_MATCHED_MESSAGE (a tag filter skipped them): keep what came, go on at
  ``next_offset``. Without a tag filter every offset up to ``next_offset`` must have come:
  a pull skips units whose CommitLog file retention already deleted, so a gap is a loss
  (with a tag filter a gap is what the filter skipped, and such a loss goes unseen).
- OFFSET_TOO_SMALL, MESSAGE_WAS_REMOVING, OFFSET_FOUND_NULL: retention removed
  [offset, next_offset); fail or skip (``failOnDataLoss``).
- NO_MESSAGE_IN_QUEUE, OFFSET_OVERFLOW_*: the replica that answered has not reached
  ``end`` yet (a slave behind its master, a group mid-failover): wait with backoff, then
  fail or skip as for lost offsets.
"""

from __future__ import annotations

import time
from binascii import a2b_base64
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]

from spark_jobs.errors import LostOffsets
from spark_jobs.http_client import SpoolmqClient
from spark_jobs.properties_column import KEYS_TYPE, PROPERTIES_TYPE
from spark_jobs.records import TIMESTAMP_TYPE
from spark_jobs.streaming.discovery import LossCase, report_losses
from spark_jobs.streaming.offsets import QueueRange

ROWS_PER_BATCH: Final = 4096
_READ: Final = frozenset({"FOUND", "NO_MATCHED_MESSAGE"})
_REMOVED: Final = frozenset({"OFFSET_TOO_SMALL", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL"})

ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("key", pa.string(), nullable=True),
        pa.field("keys", KEYS_TYPE, nullable=False),
        pa.field("value", pa.binary(), nullable=False),
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("queue_offset", pa.int64(), nullable=False),
        pa.field("msg_id", pa.string(), nullable=False),
        pa.field("tags", pa.string(), nullable=True),
        pa.field("properties", PROPERTIES_TYPE, nullable=False),
        pa.field("born_timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("store_timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("broker_group", pa.string(), nullable=True),
    ]
)
"""The rows of the ``spoolmq`` source; its Spark schema is derived from this one."""


def fetch_range(
    client: SpoolmqClient,
    queue_range: QueueRange,
    tags: str | None,
    fail_on_data_loss: bool,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[pa.RecordBatch]:
    """The messages of ``queue_range`` in offset order, ROWS_PER_BATCH rows per batch."""
    topic, queue_id, end = queue_range.topic, queue_range.queue_id, queue_range.end
    offset = queue_range.start
    pending: list[dict[str, Any]] = []
    waits = 0
    while offset < end:
        answer = client.pull(topic, queue_id, offset, end - offset, tags)
        status, next_offset = answer["status"], int(answer["next_offset"])
        if status in _READ and next_offset > offset:
            messages = [m for m in answer["messages"] if m["queue_offset"] < end]
            if tags is None:
                holes = gaps(offset, min(next_offset, end), messages)
                report_lost_runs(topic, queue_id, holes, fail_on_data_loss)
            pending.extend(messages)
            offset, waits = next_offset, 0
        elif status in _REMOVED and next_offset > offset:
            report_lost_runs(topic, queue_id, [(offset, min(next_offset, end))], fail_on_data_loss)
            offset, waits = min(next_offset, end), 0
        elif waits < client.retry.retries:
            sleep(client.retry.delay_s(waits))
            waits += 1
        else:
            behind = int(answer.get("max_offset", offset))
            report_lost_runs(topic, queue_id, [(max(offset, behind), end)], fail_on_data_loss)
            offset = end
        if len(pending) >= ROWS_PER_BATCH:
            yield to_batch(pending, queue_range)
            pending = []
    if pending:
        yield to_batch(pending, queue_range)


def report_lost_runs(
    topic: str, queue_id: int, runs: Iterable[tuple[int, int]], fail: bool
) -> None:
    """The runs [from, to) of one queue went from under a planned range."""
    losses = [LostOffsets(topic, queue_id, start, stop) for start, stop in runs]
    report_losses(losses, LossCase.WHILE_READING, fail)


def gaps(start: int, stop: int, messages: list[dict[str, Any]]) -> Iterator[tuple[int, int]]:
    """The runs of offsets in [start, stop) that no message of ``messages`` holds."""
    expected = start
    for message in messages:
        if message["queue_offset"] > expected:
            yield expected, message["queue_offset"]
        expected = message["queue_offset"] + 1
    if expected < stop:
        yield expected, stop


def to_batch(messages: list[dict[str, Any]], queue_range: QueueRange) -> pa.RecordBatch:
    """Pulled messages (bodies base64) as one record batch of ARROW_SCHEMA."""
    n = len(messages)
    keys = [list(m.get("keys") or ()) for m in messages]
    columns = [
        pa.array([k[0] if k else None for k in keys], pa.string()),
        pa.array(keys, KEYS_TYPE),
        pa.array([a2b_base64(m["body"]) for m in messages], pa.binary()),
        pa.array([queue_range.topic] * n, pa.string()),
        pa.array([queue_range.queue_id] * n, pa.int32()),
        pa.array([m["queue_offset"] for m in messages], pa.int64()),
        pa.array([m["msg_id"] for m in messages], pa.string()),
        pa.array([m.get("tags") for m in messages], pa.string()),
        pa.array([list((m.get("properties") or {}).items()) for m in messages], PROPERTIES_TYPE),
        pa.array([m["born_timestamp"] * 1000 for m in messages], TIMESTAMP_TYPE),
        pa.array([m["store_timestamp"] * 1000 for m in messages], TIMESTAMP_TYPE),
        pa.array([queue_range.broker_group] * n, pa.string()),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)

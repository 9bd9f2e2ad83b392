"""Reading one queue range over HTTP into Arrow record batches (runs on the executors).

A range [start, end) was fixed by the driver and may be read again after a failure, so
the loop reads exactly it: range reads (:meth:`~spark_jobs.http_client.SpoolmqClient.records`,
up to ``fetchMaxBytes`` each, Kafka's ``fetch.max.bytes``) never ask past ``end``. Their
records come as the CommitLog stores them and are decoded by the store-directory source's
vectorised decoder (:func:`spark_jobs.records.build_batch`): one batch per read. What a read
says about the offsets decides the rest:

- FOUND / NO_MATCHED_MESSAGE (a filter skipped them): keep what came, go on at
  ``next_offset``. Without a filter every offset up to ``next_offset`` must have come: a
  read skips units whose CommitLog file retention already deleted, so a gap is a loss
  (with a filter a gap is what the filter skipped, and such a loss goes unseen).
- OFFSET_TOO_SMALL, MESSAGE_WAS_REMOVING, OFFSET_FOUND_NULL: retention removed
  [offset, next_offset); fail or skip (``failOnDataLoss``).
- NO_MESSAGE_IN_QUEUE, OFFSET_OVERFLOW_*: the replica that answered has not reached
  ``end`` yet (a slave behind its master, a group mid-failover): wait with backoff, then
  fail or skip as for lost offsets. Where it holds the queue just up to the read's offset
  (OFFSET_OVERFLOW_ONE) the wait is the broker's long poll (``wait_ms``), which answers as
  soon as the records arrive rather than after the backoff.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from spark_jobs.errors import LostOffsets
from spark_jobs.http_client import DEFAULT_FETCH_BYTES, SpoolmqClient
from spark_jobs.properties_column import KEYS_TYPE, PROPERTIES_TYPE
from spark_jobs.records import TIMESTAMP_TYPE, build_batch, properties_without, range_records
from spark_jobs.streaming.discovery import LossCase, report_losses
from spark_jobs.streaming.offsets import QueueRange
from storage.record.properties import PROPERTY_KEYS, PROPERTY_TAGS

_READ: Final = frozenset({"FOUND", "NO_MATCHED_MESSAGE"})
_REMOVED: Final = frozenset({"OFFSET_TOO_SMALL", "MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL"})
_AT_HEAD: Final = frozenset({"OFFSET_OVERFLOW_ONE"})
"""The replica that answered holds the queue up to the read's offset: a long poll there
returns as soon as the records arrive (a slave catching up, a group after a failover)."""
_OWN_COLUMNS: Final = (PROPERTY_TAGS, PROPERTY_KEYS)
"""Properties the rows show in columns of their own, not in ``properties`` (as a pull)."""

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
    sql: str | None = None,
    max_bytes: int = DEFAULT_FETCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """The messages of ``queue_range`` in offset order, one batch per range read of up to
    ``max_bytes`` (those passing ``tags`` and the SQL92 filter ``sql``, which the broker
    applies)."""
    topic, queue_id, end = queue_range.topic, queue_range.queue_id, queue_range.end
    offset = queue_range.start
    waits = wait_ms = 0
    while offset < end:
        answer = client.records(topic, queue_id, offset, end, max_bytes, tags, sql, wait_ms)
        status, next_offset = answer.status, answer.next_offset
        wait_ms = 0
        if status in _READ and next_offset > offset:
            batch = to_batch(answer.records, queue_range)
            if tags is None and sql is None:  # a filtered read has gaps of its own
                offsets = np.asarray(batch.column("queue_offset").to_numpy(), dtype=np.int64)
                holes = gaps(offset, min(next_offset, end), offsets)
                report_lost_runs(topic, queue_id, holes, fail_on_data_loss)
            if batch.num_rows:
                yield batch
            offset, waits = next_offset, 0
        elif status in _REMOVED and next_offset > offset:
            report_lost_runs(topic, queue_id, [(offset, min(next_offset, end))], fail_on_data_loss)
            offset, waits = min(next_offset, end), 0
        elif waits < client.retry.retries:
            if status in _AT_HEAD:  # the broker parks the next read until records come
                wait_ms = int(client.retry.backoff_s(waits) * 1000)
            else:
                sleep(client.retry.backoff_s(waits))
            waits += 1
        else:
            behind = answer.max_offset
            report_lost_runs(topic, queue_id, [(max(offset, behind), end)], fail_on_data_loss)
            offset = end


SAMPLE_BYTES: Final = 64 * 1024
"""The records a driver reads of a queue range to learn their size."""


def bytes_per_offset(
    client: SpoolmqClient, queue_range: QueueRange, tags: str | None = None, sql: str | None = None
) -> float | None:
    """About how many bytes of records an offset of ``queue_range`` holds, from its first
    records (one small range read; filtered-out offsets count as none); None when it cannot
    tell (nothing there, or its first offsets are gone: the partition's read reports that)."""
    sample = client.records(
        queue_range.topic,
        queue_range.queue_id,
        queue_range.start,
        queue_range.end,
        SAMPLE_BYTES,
        tags,
        sql,
    )
    scanned = sample.next_offset - queue_range.start
    if sample.status not in _READ or scanned <= 0:
        return None
    return len(sample.records) / scanned


def report_lost_runs(
    topic: str, queue_id: int, runs: Iterable[tuple[int, int]], fail: bool
) -> None:
    """The runs [from, to) of one queue went from under a planned range."""
    losses = [LostOffsets(topic, queue_id, start, stop) for start, stop in runs]
    report_losses(losses, LossCase.WHILE_READING, fail)


def gaps(start: int, stop: int, offsets: Any) -> list[tuple[int, int]]:
    """The runs of offsets in [start, stop) missing from ``offsets`` (ascending, inside
    that range)."""
    bounds = np.concatenate([[start - 1], np.asarray(offsets, dtype=np.int64), [stop]])
    jumps = np.flatnonzero(np.diff(bounds) > 1)
    return [(int(bounds[i]) + 1, int(bounds[i + 1])) for i in jumps.tolist()]


def to_batch(records: bytes, queue_range: QueueRange) -> pa.RecordBatch:
    """The records of a range read (as the CommitLog stores them) as one record batch of
    ARROW_SCHEMA: decoded by the store-directory source's decoder, those before the
    range's end, under the range's queue (its cluster-wide id through a proxy)."""
    data, positions = range_records(records)
    decoded = build_batch(data, positions, 0, "")
    if decoded.num_rows and decoded.column("queue_offset")[-1].as_py() >= queue_range.end:
        decoded = decoded.filter(pc.less(decoded.column("queue_offset"), queue_range.end))
    n = decoded.num_rows
    keys = decoded.column("keys")
    columns = [
        _first_keys(keys),
        keys,
        decoded.column("body"),
        pa.repeat(pa.scalar(queue_range.topic, pa.string()), n),
        pa.repeat(pa.scalar(queue_range.queue_id, pa.int32()), n),
        decoded.column("queue_offset"),
        decoded.column("msg_id"),
        decoded.column("tags"),
        properties_without(decoded.column("properties"), _OWN_COLUMNS),
        decoded.column("born_timestamp"),
        decoded.column("store_timestamp"),
        pa.repeat(pa.scalar(queue_range.broker_group, pa.string()), n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _first_keys(keys: Any) -> Any:
    """The first of each row's keys (null where it has none): the ``key`` column."""
    lengths = np.asarray(pc.list_value_length(keys).to_numpy(zero_copy_only=False))
    starts = np.asarray(keys.offsets.to_numpy()[:-1], dtype=np.int64)
    return keys.values.take(pa.array(starts, mask=lengths == 0))

"""The ``spoolmq`` sink's writers: ``writeStream.format("spoolmq")`` and
``write.format("spoolmq")``, exactly once through ``Idempotency-Key``.

A task's batches are keyed by the write and the task (:mod:`spark_jobs.streaming.produce`):

- a stream: ``spark:<query id>:<micro-batch id>:<partition>:<n>``. Both ids come from
  Spark (the query id is kept in the checkpoint), so a task retry and a restart from the
  checkpoint send the same keys, and the broker stores each batch once.
- a batch write: ``spark:write:<write id>:<partition>:<n>``, the write id fresh per
  ``save()`` (task retries repeat it) unless ``writeId`` names it, for a re-run.

The bound is the broker's dedup window (``--dedup-window-s``, 300 s by default): a
micro-batch re-sent later than that after its first attempt -- a query down for longer --
may store that micro-batch's messages twice.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_jobs.http_client import SpoolmqClient
from spark_jobs.streaming.options import SinkOptions
from spark_jobs.streaming.produce import check_columns, key_prefix, outgoing_rows, send_task

LOG = logging.getLogger("spark_jobs.streaming")
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class SentByTask(WriterCommitMessage):
    """What one task sent (to the driver's commit)."""

    partition: int
    messages: int
    requests: int
    replayed_messages: int
    dropped_properties: int


def _write(batches: Iterable[Any], options: SinkOptions, prefix: str, partition: int) -> SentByTask:
    rows = (row for batch in batches for row in outgoing_rows(batch, options.topic))
    with SpoolmqClient(options.connection) as client:
        tally = send_task(client, rows, options, prefix)
    return SentByTask(
        partition,
        tally.messages,
        tally.requests,
        tally.replayed_messages,
        tally.dropped_properties,
    )


def _summary(messages: Iterable[WriterCommitMessage | None]) -> str:
    sent = [m for m in messages if isinstance(m, SentByTask)]
    text = (
        f"{sum(m.messages for m in sent):,} messages in {sum(m.requests for m in sent):,} "
        f"requests from {len(sent)} tasks"
    )
    replayed = sum(m.replayed_messages for m in sent)
    if replayed:
        text += f", {replayed:,} of them already stored by an earlier attempt"
    dropped = sum(m.dropped_properties for m in sent)
    if dropped:
        text += f"; {dropped:,} properties left out (empty, or holding \\x01/\\x02)"
    return text


class SpoolmqStreamWriter(DataSourceStreamArrowWriter):
    """Each micro-batch's rows, sent under keys of (query, micro-batch, partition)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_columns(schema.names, options)
        self.options = options

    def write(self, iterator: Iterator[Any]) -> SentByTask:
        context = TaskContext.get()
        assert context is not None, "write runs in a Spark task"
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            raise RuntimeError("the spoolmq stream writer ran outside a streaming query")
        partition = context.partitionId()
        return _write(iterator, self.options, key_prefix(query_id, batch_id, partition), partition)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        LOG.info("micro-batch %d written: %s", batchId, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        LOG.warning(
            "micro-batch %d failed after %s; a new attempt re-sends it under the same keys",
            batchId,
            _summary(messages),
        )


class SpoolmqBatchWriter(DataSourceArrowWriter):
    """A DataFrame's rows, sent under keys of (write id, partition)."""

    def __init__(self, options: SinkOptions, schema: StructType) -> None:
        check_columns(schema.names, options)
        self.options = options
        self.write_id = options.write_id or uuid.uuid4().hex

    def write(self, iterator: Iterator[Any]) -> SentByTask:
        context = TaskContext.get()
        assert context is not None, "write runs in a Spark task"
        partition = context.partitionId()
        prefix = key_prefix("write", self.write_id, partition)
        return _write(iterator, self.options, prefix, partition)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        LOG.info("write %s done: %s", self.write_id, _summary(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        LOG.warning(
            "write %s failed after %s; save() again with option writeId=%s to re-send "
            "without duplicates (inside the broker's dedup window)",
            self.write_id,
            _summary(messages),
            self.write_id,
        )

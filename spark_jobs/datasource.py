"""Python Data Sources over store directories: ``spoolmq_commitlog`` and ``spoolmq_consumequeue``.

Register them once per session with :func:`register` (``build_session`` does), then::

    spark.read.format("spoolmq_commitlog").load("/var/lib/spoolmq")
    spark.read.format("spoolmq_commitlog").option("stores", "/a,/b").option("topics", "Orders")
        .option("from_time", "2024-05-01T00:00:00Z").load()
    spark.read.format("spoolmq_consumequeue").load("/var/lib/spoolmq")

The readers only read (``"rb"``, read-only mmap); a server may be appending meanwhile. Filters
are options, not ``pushFilters`` (which would need ``spark.sql.python.filterPushdown.enabled``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.options import parse_commitlog_options, store_dirs_from_options
from spark_jobs.scan import ByteRange, plan_ranges, read_range
from spark_jobs.streaming.datasource import SpoolmqDataSource
from storage.store_reader import (
    QueueOffsets,
    all_queue_offsets,
    store_timestamp_at_queue_offset,
)

COMMITLOG_FORMAT = "spoolmq_commitlog"
CONSUMEQUEUE_FORMAT = "spoolmq_consumequeue"

COMMITLOG_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("commit_log_offset", LongType(), False),
        StructField("size", IntegerType(), False),
        StructField("msg_id", StringType(), False),
        StructField("uniq_key", StringType(), True),
        StructField("tags", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), False),
        StructField("properties", MapType(StringType(), StringType(), False), False),
        StructField("body", BinaryType(), False),
        StructField("born_timestamp", TimestampType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("reconsume_times", IntegerType(), False),
        StructField("sys_flag", IntegerType(), False),
        StructField("store_dir", StringType(), False),
    ]
)
"""One row per CommitLog record; see :mod:`spark_jobs.records` for the Arrow side."""

CONSUMEQUEUE_SCHEMA = StructType(
    [
        StructField("store_dir", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("min_offset", LongType(), False),
        StructField("max_offset", LongType(), False),
        StructField("message_count", LongType(), False),
        StructField("first_store_timestamp", TimestampType(), True),
        StructField("last_store_timestamp", TimestampType(), True),
    ]
)
"""One row per (store, topic, queue): min/max logical offsets and the store times there."""


class CommitLogDataSource(DataSource):
    """``spoolmq_commitlog``: every complete CommitLog record of one or more stores.

    Options: ``path``/``paths`` (from ``load``) or ``stores`` (comma-separated); ``topics``
    (comma-separated); ``from_time``/``to_time`` (epoch ms or ISO 8601, ``[from, to)``);
    ``split_size`` (bytes per partition, default 64m); ``batch_size`` (records per Arrow
    batch); ``check_crc`` (verify body CRCs; a mismatch ends the file like corruption).
    """

    @classmethod
    def name(cls) -> str:
        return COMMITLOG_FORMAT

    def schema(self) -> StructType:
        return COMMITLOG_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CommitLogReader(dict(self.options))


class CommitLogReader(DataSourceReader):
    """Plans byte ranges on the driver and reads each on an executor as Arrow batches."""

    def __init__(self, options: dict[str, str]) -> None:
        self.options = parse_commitlog_options(options)

    def partitions(self) -> Sequence[InputPartition]:
        """Byte ranges of the CommitLog files, planned once on the driver."""
        ranges = plan_ranges(
            self.options.store_dirs, self.options.split_size, self.options.record_filter
        )
        return [InputPartition(r) for r in ranges] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """Arrow record batches of one byte range."""
        byte_range = partition.value
        if not isinstance(byte_range, ByteRange):
            return iter(())
        return read_range(
            byte_range,
            self.options.record_filter,
            self.options.batch_size,
            self.options.check_crc,
        )


class ConsumeQueueDataSource(DataSource):
    """``spoolmq_consumequeue``: each queue's min and max offsets, per store.

    Options: ``path``/``paths`` or ``stores``, as for ``spoolmq_commitlog``.
    """

    @classmethod
    def name(cls) -> str:
        return CONSUMEQUEUE_FORMAT

    def schema(self) -> StructType:
        return CONSUMEQUEUE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return ConsumeQueueReader(store_dirs_from_options(dict(self.options)))


class ConsumeQueueReader(DataSourceReader):
    """One partition per store directory."""

    def __init__(self, store_dirs: list[str]) -> None:
        self.store_dirs = store_dirs

    def partitions(self) -> Sequence[InputPartition]:
        """One partition per store."""
        return [InputPartition(store_dir) for store_dir in self.store_dirs]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        """A row per queue of one store."""
        store_dir = str(partition.value)
        for offsets in all_queue_offsets(Path(store_dir)):
            yield queue_row(store_dir, offsets)


def queue_row(store_dir: str, offsets: QueueOffsets) -> tuple[Any, ...]:
    """A ``spoolmq_consumequeue`` row of one queue."""
    first = last = None
    if offsets.message_count > 0:
        first = _store_time(store_dir, offsets, offsets.min_offset)
        last = _store_time(store_dir, offsets, offsets.max_offset - 1)
    return (
        store_dir,
        offsets.topic,
        offsets.queue_id,
        offsets.min_offset,
        offsets.max_offset,
        offsets.message_count,
        first,
        last,
    )


def _store_time(store_dir: str, offsets: QueueOffsets, offset: int) -> datetime | None:
    stamp = store_timestamp_at_queue_offset(
        Path(store_dir), offsets.topic, offsets.queue_id, offset
    )
    return _utc(stamp)


def _utc(milliseconds: int | None) -> datetime | None:
    return None if milliseconds is None else datetime.fromtimestamp(milliseconds / 1000, UTC)


def register(spark: SparkSession) -> None:
    """Register the data sources with a session: the two over store directories and
    ``spoolmq`` over the HTTP API."""
    spark.dataSource.register(CommitLogDataSource)
    spark.dataSource.register(ConsumeQueueDataSource)
    spark.dataSource.register(SpoolmqDataSource)


__all__ = [
    "COMMITLOG_FORMAT",
    "COMMITLOG_SCHEMA",
    "CONSUMEQUEUE_FORMAT",
    "CONSUMEQUEUE_SCHEMA",
    "CommitLogDataSource",
    "ConsumeQueueDataSource",
    "register",
]

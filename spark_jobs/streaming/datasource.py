"""``spoolmq``: a Spark data source over spoolmq's HTTP API -- stream and batch, read and
write -- in the Kafka source's spirit.

Register it once per session (``spark_jobs.datasource.register`` does, and so does
``build_session``), then::

    spark.readStream.format("spoolmq").option("spoolmq.endpoints", "http://127.0.0.1:8080")
        .option("subscribe", "Orders").load()
    spark.read.format("spoolmq").option("spoolmq.endpoints", url).option("subscribe", "Orders")
        .option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    df.writeStream.format("spoolmq").option("spoolmq.endpoints", url).option("topic", "Paid")
        .option("checkpointLocation", "/chk").start()

Options, columns and guarantees: the README's "Spark Structured Streaming" section.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from spark_jobs.streaming.fetch import ARROW_SCHEMA
from spark_jobs.streaming.options import parse_sink_options, parse_source_options
from spark_jobs.streaming.sink import SpoolmqBatchWriter, SpoolmqStreamWriter
from spark_jobs.streaming.source import SpoolmqBatchReader, SpoolmqStreamReader

SPOOLMQ_FORMAT = "spoolmq"

SOURCE_SCHEMA: StructType = from_arrow_schema(ARROW_SCHEMA)
"""One row per message: ``key`` is the first of ``keys``; ``queue_id`` is cluster-wide
through a proxy, where ``broker_group`` names the group holding the queue (else null)."""


class SpoolmqDataSource(DataSource):
    """``format("spoolmq")``."""

    @classmethod
    def name(cls) -> str:
        return SPOOLMQ_FORMAT

    def schema(self) -> StructType:
        return SOURCE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return SpoolmqBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return SpoolmqStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return SpoolmqBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return SpoolmqStreamWriter(parse_sink_options(self.options), schema)

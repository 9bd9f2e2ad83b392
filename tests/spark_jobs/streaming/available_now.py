"""A ``spoolmq`` stream run in this test process with ``Trigger.AvailableNow``: it reads
what the queues hold (in bounded micro-batches) and stops by itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, Row, SparkSession


@dataclass
class Run:
    """What a run read, micro-batch by micro-batch, its progress, and its error if any."""

    batches: list[list[Row]]
    progress: list[Any]
    error: Exception | None

    @property
    def rows(self) -> list[Row]:
        return [row for batch in self.batches for row in batch]


def run_available_now(spark: SparkSession, options: dict[str, Any], checkpoint: Path) -> Run:
    batches: list[list[Row]] = []

    def collect(frame: DataFrame, batch_id: int) -> None:
        batches.append(frame.collect())

    query = (
        spark.readStream.format("spoolmq")
        .options(**options)
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180), "the query did not finish"
    except PySparkException:
        pass  # the query's error, below
    return Run(batches, query.recentProgress, query.exception())

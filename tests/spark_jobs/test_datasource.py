"""The ``spoolmq_commitlog`` and ``spoolmq_consumequeue`` data sources in a real local Spark."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema

from spark_jobs.datasource import COMMITLOG_SCHEMA
from spark_jobs.records import ARROW_SCHEMA
from storage import MessageStore
from tests.spark_jobs.stores import (
    CONFIG,
    FILE_SIZE,
    Written,
    expected_row,
    sorted_rows,
    tear_tail,
    varied_message,
    varied_store,
    write_store,
)
from tests.spark_jobs.v2_records import LONG_TOPIC, mixed_records


def rows_of(frame: DataFrame) -> list[dict[str, Any]]:
    return sorted_rows(frame.toArrow().to_pylist())


def commitlog(spark: SparkSession, *stores: str, **options: str) -> DataFrame:
    reader = spark.read.format("spoolmq_commitlog")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(list(stores) if len(stores) > 1 else stores[0])


def test_arrow_batches_have_the_schema_spark_expects() -> None:
    assert to_arrow_schema(COMMITLOG_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_dataframe_equals_what_was_written(spark: SparkSession, tmp_path: Path) -> None:
    """Records crossing CommitLog files, binary bodies, a torn tail, several partitions."""
    survivors = tear_tail(varied_store(tmp_path / "store", count=500))
    frame = commitlog(spark, str(tmp_path / "store"), split_size="24k")
    assert frame.rdd.getNumPartitions() > len(list((tmp_path / "store/commitlog").iterdir()))
    assert rows_of(frame) == [expected_row(w) for w in survivors]


def test_several_stores_and_options(spark: SparkSession, tmp_path: Path) -> None:
    first = varied_store(tmp_path / "a", count=150, seed=3)
    rng = random.Random(4)

    def tick(index: int) -> None:
        time.sleep(0.002)

    second = write_store(
        tmp_path / "b", (varied_message(rng, i) for i in range(150)), before_put=tick
    )
    both = commitlog(spark, str(tmp_path / "a"), str(tmp_path / "b"))
    assert rows_of(both) == sorted_rows(expected_row(w) for w in first + second)
    counts = {r.store_dir: r["count"] for r in both.groupBy("store_dir").count().collect()}
    assert counts == {first[0].store_dir: 150, second[0].store_dir: 150}

    since, until = second[40].result.store_timestamp, second[90].result.store_timestamp
    selected = commitlog(
        spark,
        str(tmp_path / "b"),
        topics="Orders,Audit",
        from_time=str(since),
        to_time=str(until),
    )
    assert rows_of(selected) == [
        expected_row(w)
        for w in second
        if w.message.topic in ("Orders", "Audit") and since <= w.result.store_timestamp < until
    ]
    paid = commitlog(spark, str(tmp_path / "b"), filter="TAGS = 'Paid' AND KEYS IS NOT NULL")
    assert rows_of(paid) == sorted_rows(
        expected_row(w)
        for w in second
        if w.message.properties.get("TAGS") == "Paid" and w.message.properties.get("KEYS")
    )


def test_consumequeue_source_equals_the_store(spark: SparkSession, tmp_path: Path) -> None:
    written = varied_store(tmp_path / "store", count=300)
    with MessageStore.open(tmp_path / "store", CONFIG) as store:
        expected = sorted(
            (t, q, store.min_offset_in_queue(t, q), store.max_offset_in_queue(t, q))
            for t in store.topics()
            for q in store.queue_ids(t)
        )
        rows = spark.read.format("spoolmq_consumequeue").load(str(tmp_path / "store")).collect()
    assert sorted((r.topic, r.queue_id, r.min_offset, r.max_offset) for r in rows) == expected
    first_of_orders_0 = next(
        w.result for w in written if (w.message.topic, w.message.queue_id) == ("Orders", 0)
    )
    orders_0 = next(r for r in rows if (r.topic, r.queue_id) == ("Orders", 0))
    assert round(orders_0.first_store_timestamp.timestamp() * 1000) == (
        first_of_orders_0.store_timestamp
    )
    assert orders_0.message_count == orders_0.max_offset - orders_0.min_offset


def test_reading_a_store_that_is_being_written(spark: SparkSession, tmp_path: Path) -> None:
    rng = random.Random(6)
    store_dir = tmp_path / "store"
    with MessageStore.open(store_dir, CONFIG) as store:
        written = [
            Written(str(store_dir.resolve()), m, store.put([m])[0])
            for m in (varied_message(rng, i) for i in range(120))
        ]
        assert rows_of(commitlog(spark, str(store_dir))) == [expected_row(w) for w in written]
        written += [
            Written(str(store_dir.resolve()), m, store.put([m])[0])
            for m in (varied_message(rng, i) for i in range(120, 200))
        ]
        assert rows_of(commitlog(spark, str(store_dir))) == [expected_row(w) for w in written]


def test_v2_records_appended_to_a_store_are_read(spark: SparkSession, tmp_path: Path) -> None:
    """RocketMQ 5.x v2 records (two-byte topic length) after spoolmq's v1 ones in one file."""
    written = varied_store(tmp_path / "store", count=40, seed=11)
    last = written[-1].result
    end = last.physical_offset + last.size
    rng = random.Random(12)
    mix = [(varied_message(rng, i), i % 2 == 0, LONG_TOPIC if i == 3 else None) for i in range(8)]
    store_dir = written[0].store_dir
    buffer, appended = mixed_records(
        mix, file_start=end, store_dir=store_dir, store_time_0=last.store_timestamp + 1
    )
    path = tmp_path / "store" / "commitlog" / f"{end // FILE_SIZE * FILE_SIZE:020d}"
    assert end % FILE_SIZE + len(buffer) + 8 <= path.stat().st_size
    with open(path, "r+b") as handle:
        handle.seek(end % FILE_SIZE)
        handle.write(buffer)
    frame = commitlog(spark, str(tmp_path / "store"), split_size="8k")
    expected = [expected_row(w) for w in written] + sorted_rows(appended)
    assert rows_of(frame) == expected
    long_topic = commitlog(spark, str(tmp_path / "store"), topics=LONG_TOPIC)
    assert [row["commit_log_offset"] for row in rows_of(long_topic)] == [
        row["commit_log_offset"] for row in sorted_rows(appended) if row["topic"] == LONG_TOPIC
    ]

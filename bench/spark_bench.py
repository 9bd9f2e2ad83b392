"""Records per second of the ``spoolmq_commitlog`` data source next to a pure-Python parse.

1. Build a store of at least ``--size-mib`` MiB (default 256) through ``MessageStore``:
   200-byte bodies with a tag, a key and a UNIQ_KEY, round robin over 8 queues, in
   ``--file-size-mib`` CommitLog files (default 64).
2. Baseline: a single-process pure-Python parse of the same files, in the same run:
   ``storage.store_reader.iter_store_records`` (``check_record`` + ``decode_record`` per
   record, what a storage-layer tool does).
3. Spark: ``spark.read.format("spoolmq_commitlog").load(store)`` on ``--master`` (default
   local[2]) written to the ``noop`` sink, so every column of every row is produced and
   handed to the JVM. The first run includes starting the Python workers; the best of the
   following ``--runs`` is reported too.

Run by hand (not part of the test suite)::

    uv run python bench/spark_bench.py
    uv run python bench/spark_bench.py --size-mib 1024 --file-size-mib 1024 --split-size 64m
    uv run python bench/spark_bench.py --store /path/to/existing/store

Prints records per second for each side and the ratio Spark / Python (target >= 1.0).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Run as a script from the repository root or from bench/: make the packages importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage import Message, MessageStore, StoreConfig
from storage.store_reader import commit_log_files, iter_store_records

TOPICS = ("Orders", "Payments")
QUEUES = 8
BODY_SIZE = 200
BATCH = 64
MIB = 1024 * 1024


def build_store(store_dir: Path, size_mib: int, file_size_mib: int) -> int:
    """Append until the CommitLog holds ``size_mib`` MiB; returns the number of messages."""
    config = StoreConfig(commit_log_file_size=file_size_mib * MIB)
    body = bytes(range(256))[:BODY_SIZE]
    target = size_mib * MIB
    count = 0
    with MessageStore.open(store_dir, config) as store:
        while store.commit_log.max_offset < target:
            queue_id = (count // BATCH) % QUEUES
            topic = TOPICS[(count // BATCH) % len(TOPICS)]
            batch = [
                Message(
                    topic=topic,
                    body=body,
                    queue_id=queue_id,
                    properties={
                        "TAGS": "TagA",
                        "KEYS": f"key-{count + i:010d}",
                        "UNIQ_KEY": f"{count + i:032X}",
                    },
                    born_timestamp=1_700_000_000_000 + count + i,
                )
                for i in range(BATCH)
            ]
            store.put(batch)
            count += BATCH
    return count


def python_parse(store_dir: Path) -> tuple[int, float]:
    """Records and seconds of the pure-Python parse."""
    started = time.perf_counter()
    records = 0
    body_bytes = 0
    for record in iter_store_records(store_dir):
        records += 1
        body_bytes += len(record.message.body)
    return records, time.perf_counter() - started


def spark_session(master: str, local_dir: str) -> SparkSession:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import register

    spark = (
        SparkSession.builder.master(master)
        .appName("spoolmq-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.local.dir", local_dir)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_read(spark: SparkSession, store_dir: Path, split_size: str) -> float:
    """Seconds to plan and read every record into the noop sink."""
    started = time.perf_counter()
    frame = (
        spark.read.format("spoolmq_commitlog").option("split_size", split_size).load(str(store_dir))
    )
    frame.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=256)
    parser.add_argument("--file-size-mib", type=int, default=64)
    parser.add_argument("--split-size", default="64m", help="bytes per Spark partition")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=3, help="timed Spark runs after the first")
    parser.add_argument("--store", type=Path, help="read this store instead of building one")
    parser.add_argument("--keep", action="store_true", help="keep the built store")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="spoolmq-spark-bench-"))
    store_dir = args.store or work / "store"
    try:
        if args.store is None:
            started = time.perf_counter()
            count = build_store(store_dir, args.size_mib, args.file_size_mib)
            print(f"built {count:,} messages in {time.perf_counter() - started:.1f} s")
        files = commit_log_files(store_dir)
        size = sum(f.size for f in files)
        print(
            f"store {store_dir}: {len(files)} CommitLog files, {size / MIB:,.0f} MiB; "
            f"python {platform.python_version()}, {os.cpu_count()} CPUs"
        )

        records, python_seconds = python_parse(store_dir)
        python_rate = records / python_seconds
        print(
            f"pure Python parse : {records:,} records in {python_seconds:6.2f} s = "
            f"{python_rate:>10,.0f} records/s"
        )

        spark = spark_session(args.master, str(work / "spark-local"))
        spark_records = spark.read.format("spoolmq_commitlog").load(str(store_dir)).count()
        assert spark_records == records, (spark_records, records)
        first = spark_read(spark, store_dir, args.split_size)
        timed = [spark_read(spark, store_dir, args.split_size) for _ in range(args.runs)]
        best = min(timed) if timed else first
        partitions = (
            spark.read.format("spoolmq_commitlog")
            .option("split_size", args.split_size)
            .load(str(store_dir))
            .rdd.getNumPartitions()
        )
        spark.stop()
        print(
            f"spark {args.master} first: {records:,} records in {first:6.2f} s = "
            f"{records / first:>10,.0f} records/s"
        )
        print(
            f"spark {args.master} best : {records:,} records in {best:6.2f} s = "
            f"{records / best:>10,.0f} records/s ({partitions} partitions of "
            f"{args.split_size})"
        )
        print(
            f"ratio spark / python: {python_seconds / best:.2f}x "
            f"(first run, Python workers starting: {python_seconds / first:.2f}x)"
        )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Rows per second of the ``spoolmq`` source and sink (over HTTP) next to their baselines, same
run.

1. Start ``spoolmq serve`` on a free port of 127.0.0.1 with a fresh store and send
   ``--messages`` messages (default 200,000; 200-byte bodies, a tag, a key and a property)
   to a topic of 8 queues, in batches of 500.
2. Baseline A, a plain HTTP pull loop: one Python thread pulls each queue from its min to its
   max offset (``max_messages=1024``; the broker returns at most 32 per pull, as RocketMQ's)
   and decodes every message (orjson, base64 bodies) -- the least work a client does.
3. Baseline B, the store-directory data source: ``spoolmq_commitlog`` over the server's own
   store directory (read-only, next to the live server), the same topic.
4. The ``spoolmq`` source on ``--master`` (default local[2]): a batch read (earliest to
   latest) and two streams (``Trigger.AvailableNow``: every row in one micro-batch, as the
   batch readers read them in one job, and ``maxOffsetsPerTrigger`` 50,000), all into the
   ``noop`` sink, so every column of every row reaches the JVM. They read raw record
   ranges (``GET .../records``) and decode them as the store-directory source does. A
   stream is timed as the other readers are, over the work of reading the rows: from its
   first micro-batch's start to its last one's end, as the query reports them (a running
   stream starts once; its start and stop are Spark's, a second or more for the Python
   process that hosts the source). The whole query, start and stop included, is reported
   too, from the same runs.
5. The ``spoolmq`` sink (a batch write of ``--sink-messages`` rows, 200-byte bodies, a tag
   and a key, 2 partitions, its default 100 rows a keyed request) against a plain HTTP
   batch-send loop: one Python thread sending the same rows as keyed JSON batches of 100.

After one warm-up of each, the seven take turns ``--runs`` times (so a busy neighbour
slows them alike); each figure is the median [min-max] of its runs, each ratio the median
of the per-round ratios. ``--no-sink`` leaves the sink and its loop out (the readers
again, on a noisy machine). Run by hand::

    uv run python bench/streaming_bench.py
    uv run python bench/streaming_bench.py --messages 500000 --master local[2]
    uv run python bench/streaming_bench.py --no-sink
"""

from __future__ import annotations

import argparse
import base64
import datetime
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import orjson

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import StreamingQueryProgress

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.net import free_port

TOPIC = "Bench"
QUEUES = 8
BODY = bytes(range(200))
SEND_BATCH = 500
SINK_TOPIC = "BenchSink"
SINK_BATCH = 100  # the sink's default batchSize
STREAM_TRIGGER = 50_000  # maxOffsetsPerTrigger of the stream of several micro-batches


def start_server(store: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [
        str(Path(sys.executable).parent / "spoolmq"), "serve", "--store-dir", str(store),
        "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
        "--commit-log-file-size", str(64 * 1024 * 1024),
    ]  # fmt: skip
    with log.open("ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                return process
        except httpx.TransportError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"the server did not start; see {log}")


def fill(http: httpx.Client, messages: int) -> None:
    http.put(f"/v1/topics/{TOPIC}", json={"write_queue_nums": QUEUES, "read_queue_nums": QUEUES})
    body = base64.b64encode(BODY).decode()
    for start in range(0, messages, SEND_BATCH):
        batch = [
            {"body": body, "body_encoding": "base64", "tags": "TagA", "keys": [f"k{start + i}"],
             "properties": {"region": "eu"}}
            for i in range(min(SEND_BATCH, messages - start))
        ]  # fmt: skip
        queue = (start // SEND_BATCH) % QUEUES
        answer = http.post(
            f"/v1/topics/{TOPIC}/messages", json={"messages": batch, "queue_id": queue}
        )
        answer.raise_for_status()


def pull_loop(http: httpx.Client) -> int:
    """Every message of the topic through plain pulls; the rows decoded."""
    rows = 0
    queues = http.get(f"/v1/topics/{TOPIC}").json()["queues"]
    for queue in queues:
        offset, end = queue["min_offset"], queue["max_offset"]
        while offset < end:
            answer = http.get(
                f"/v1/topics/{TOPIC}/queues/{queue['queue_id']}/messages",
                params={"offset": offset, "max_messages": 1024, "body_encoding": "base64"},
            )
            pulled = orjson.loads(answer.content)
            for message in pulled["messages"]:
                base64.b64decode(message["body"])
                rows += 1
            offset = pulled["next_offset"]
    return rows


def send_loop(http: httpx.Client, messages: int) -> int:
    """``messages`` rows sent as the sink sends them: keyed JSON batches of SINK_BATCH."""
    body = base64.b64encode(BODY).decode()
    run = os.urandom(8).hex()
    for start in range(0, messages, SINK_BATCH):
        key = f"bench:{run}:{start}"
        batch = [
            {"body": body, "body_encoding": "base64", "tags": "TagA", "keys": [f"k{start + i}"]}
            for i in range(min(SINK_BATCH, messages - start))
        ]
        answer = http.post(
            f"/v1/topics/{SINK_TOPIC}/messages",
            json={"messages": batch, "sharding_key": key},
            headers={"Idempotency-Key": key},
        )
        answer.raise_for_status()
    return messages


def sink_write(spark: SparkSession, url: str, messages: int) -> None:
    from pyspark.sql import functions as f

    frame = spark.range(messages, numPartitions=2).select(
        f.lit(BODY).alias("value"),
        f.lit("TagA").alias("tags"),
        f.concat(f.lit("k"), f.col("id").cast("string")).alias("key"),
    )
    writer = frame.write.format("spoolmq").option("spoolmq.endpoints", url)
    writer.option("topic", SINK_TOPIC).mode("append").save()


def http_batch(spark: SparkSession, url: str) -> None:
    frame = spark.read.format("spoolmq").option("spoolmq.endpoints", url)
    frame.option("subscribe", TOPIC).load().write.format("noop").mode("overwrite").save()


def http_stream(spark: SparkSession, url: str, checkpoint: Path, per_trigger: int | None) -> float:
    """One AvailableNow query over the topic, ``per_trigger`` rows a micro-batch (None: all
    in one); the seconds from its first micro-batch's start to its last one's end."""
    shutil.rmtree(checkpoint, ignore_errors=True)
    reader = (
        spark.readStream.format("spoolmq")
        .option("spoolmq.endpoints", url)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
    )
    if per_trigger is not None:
        reader = reader.option("maxOffsetsPerTrigger", per_trigger)
    query = (
        reader.load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return micro_batches_span(query.recentProgress)


def micro_batches_span(progress: Sequence[StreamingQueryProgress]) -> float:
    """Seconds from the first micro-batch's start to the last one's end, from the progress a
    query reports of each (its trigger's start time and how long the trigger took)."""
    if not progress:
        raise RuntimeError("the query reported no micro-batch")

    def started(batch: StreamingQueryProgress) -> float:
        return datetime.datetime.fromisoformat(batch.timestamp.replace("Z", "+00:00")).timestamp()

    last = progress[-1]
    ended = started(last) + last.durationMs["triggerExecution"] / 1000
    return ended - started(progress[0])


def store_files(spark: SparkSession, store: Path) -> None:
    frame = spark.read.format("spoolmq_commitlog").option("topics", TOPIC).load(str(store))
    frame.write.format("noop").mode("overwrite").save()


def timed(action: Callable[[], object]) -> tuple[float, float]:
    """The seconds ``action`` took, as it reports them (a float) or else by the clock, and by
    the clock."""
    started = time.perf_counter()
    reported = action()
    wall = time.perf_counter() - started
    return (reported if isinstance(reported, float) else wall), wall


def spread(values: list[float]) -> str:
    """``median [min-max]``."""
    return f"{statistics.median(values):,.2f} [{min(values):,.2f}-{max(values):,.2f}]"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sink-messages", type=int, default=100_000)
    parser.add_argument("--no-sink", action="store_true", help="measure the readers only")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="spoolmq-streaming-bench-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(work / "store", port, work / "server.log")
    try:
        with httpx.Client(base_url=url, timeout=60) as http:
            started = time.perf_counter()
            fill(http, args.messages)
            print(
                f"sent {args.messages:,} messages of {len(BODY)} B to {QUEUES} queues in "
                f"{time.perf_counter() - started:.1f} s; python {platform.python_version()}, "
                f"{os.cpu_count()} CPUs"
            )
            assert pull_loop(http) == args.messages
            http.put(
                f"/v1/topics/{SINK_TOPIC}",
                json={"write_queue_nums": QUEUES, "read_queue_nums": QUEUES},
            )
        print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        from spark_jobs.session import build_session

        spark = build_session(
            "spoolmq-streaming-bench",
            args.master,
            {
                "spark.ui.enabled": "false",
                "spark.driver.memory": "2g",
                "spark.local.dir": str(work / "spark-local"),
                "spark.sql.shuffle.partitions": "2",
                "spark.log.level": "ERROR",
            },
        )
        count = spark.read.format("spoolmq").option("spoolmq.endpoints", url)
        assert count.option("subscribe", TOPIC).load().count() == args.messages
        puller = httpx.Client(base_url=url, timeout=60)
        sides: dict[str, Callable[[], object]] = {
            "plain HTTP pull loop (1 thread)": lambda: pull_loop(puller),
            f"spoolmq_commitlog (store files), {args.master}": lambda: store_files(
                spark, work / "store"
            ),
            f"spoolmq batch read (HTTP), {args.master}": lambda: http_batch(spark, url),
            f"spoolmq stream, AvailableNow, one trigger, {args.master}": lambda: http_stream(
                spark, url, work / "checkpoint", None
            ),
            f"spoolmq stream, AvailableNow, {STREAM_TRIGGER:,} a trigger, {args.master}": (
                lambda: http_stream(spark, url, work / "checkpoint", STREAM_TRIGGER)
            ),
            "plain HTTP batch-send loop (1 thread)": lambda: send_loop(puller, args.sink_messages),
            f"spoolmq sink (batch write), {args.master}": lambda: sink_write(
                spark, url, args.sink_messages
            ),
        }
        readers = 5  # the pull loop, the store files, the batch read, the two streams
        rows = dict.fromkeys(sides, args.messages)
        for name in list(sides)[readers:]:
            rows[name] = args.sink_messages
        if args.no_sink:
            sides = dict(list(sides.items())[:readers])
        for action in sides.values():  # warm: Python workers started, code compiled
            action()
        names = list(sides)
        wholes = {name: f"{name}, whole query (start and stop too)" for name in names[3:readers]}
        rates: dict[str, list[float]] = {name: [] for name in [*names, *wholes.values()]}
        for _ in range(args.runs):  # the sides alternate, so load hits them alike
            for name, action in sides.items():
                seconds, wall = timed(action)
                rates[name].append(rows[name] / seconds)
                if name in wholes:
                    rates[wholes[name]].append(rows[name] / wall)
        spark.stop()
        puller.close()
        shown = [*names[:readers], *wholes.values(), *names[readers:]]
        for name in shown:
            thousands = [rate / 1000 for rate in rates[name]]
            print(f"{name:<45} {spread(thousands):>24} k rows/s")
        compared = [*names[2:readers], *wholes.values()]
        pairs = [(reader, base) for reader in compared for base in names[:2]]
        if not args.no_sink:
            pairs.append((names[readers + 1], names[readers]))
        for name, base in pairs:
            ratios = [a / b for a, b in zip(rates[name], rates[base], strict=True)]
            print(f"{name} / {base}: {spread(ratios)}x")
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

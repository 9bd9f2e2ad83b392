"""The README's example job, killed with -9 in the middle of writing a micro-batch and run
again from its checkpoint: the target topic holds each micro-batch's table of counts
exactly once -- the tables the checkpoint's offsets call for, no more, no less.

Its rows come out of an aggregation, in no fixed order, so only the default
``rowOrder=sorted`` makes the re-run cut the same keyed sends; the broker's
``spoolmq_sends_replayed_total`` shows that the re-run did repeat sends the killed run had
made, and none was stored twice.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from pathlib import Path

import httpx
from pyspark.sql import Row, SparkSession

from spark_jobs.streaming.paid_orders import paid_per_customer
from tests.conftest import LiveServer, wait_until
from tests.spark_jobs.streaming.processes import (
    FAST_SPARK,
    checkpoint_batches,
    child_env,
    messages_in,
    start_query,
)

JOB = "spark_jobs.streaming.paid_orders"


def send_orders(http: httpx.Client, topic: str, count: int, customers: int) -> Counter[str]:
    """Orders of ``customers`` customers, two in three paid; the paid count per customer."""
    paid: Counter[str] = Counter()
    for start in range(0, count, 500):
        batch = []
        for i in range(start, min(count, start + 500)):
            customer, tag = f"c{i % customers}", "Paid" if i % 3 else "Shipped"
            batch.append({"body": f"order {i}", "tags": tag, "properties": {"customer": customer}})
            paid[customer] += tag == "Paid"
        assert http.post(f"/v1/topics/{topic}/messages", json={"messages": batch}).is_success
    return +paid


def replayed(url: str, topic: str) -> int:
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    found = re.search(rf'spoolmq_sends_replayed_total{{topic="{topic}"}} (\d+)', metrics)
    return int(found.group(1)) if found else 0


def test_killed_mid_batch_and_restarted_it_writes_every_count_once(
    spark: SparkSession, live_server: LiveServer, spark_env: dict[str, str], tmp_path: Path
) -> None:
    http = live_server.client()
    orders, counts = f"Orders{uuid.uuid4().hex[:8]}", f"Paid{uuid.uuid4().hex[:8]}"
    http.put(f"/v1/topics/{orders}", json={"write_queue_nums": 4, "read_queue_nums": 4})
    paid = send_orders(http, orders, 1200, customers=500)
    checkpoint = tmp_path / "chk"
    args = [
        "--endpoint", live_server.url, "--checkpoint", str(checkpoint),
        "--source-topic", orders, "--target-topic", counts, "--consumer-group", f"{orders}-g",
        "--max-offsets-per-trigger", "400", "--batch-size", "5",
        "--master", "local[2]", *FAST_SPARK,
    ]  # fmt: skip
    env = child_env(spark_env)

    first = start_query(JOB, [*args, "--every", "100 milliseconds"], env, tmp_path / "1.log")
    written_at_commit = {0: 0}
    try:
        # Killed once a micro-batch has sent some of its counts but is not committed.
        def mid_batch() -> bool:
            planned, committed = checkpoint_batches(checkpoint)
            written = messages_in(live_server.url, counts)
            written_at_commit.setdefault(committed, written)
            return planned > committed and written > written_at_commit[committed]

        wait_until(mid_batch, timeout=180)
    finally:
        first.kill()
    assert checkpoint_batches(checkpoint)[1] < 3, "the job finished before it was killed"

    second = start_query(JOB, args, env, tmp_path / "2.log")  # Trigger.AvailableNow
    assert second.finish(timeout=240) == 0, second.output()
    assert "paid_orders: read" in second.output()

    written = Counter(
        (r.key, json.loads(bytes(r.value))["paid"]) for r in read_topic(spark, live_server, counts)
    )
    sent = read_topic(spark, live_server, orders)
    expected: Counter[tuple[str, int]] = Counter()
    for end in micro_batch_ends(checkpoint):
        expected.update(paid_counts(sent, end).items())
    assert written == expected
    assert max(n for _, n in written) == max(paid.values())
    assert replayed(live_server.url, counts) > 0  # the re-run repeated the killed run's sends


def read_topic(spark: SparkSession, live: LiveServer, topic: str) -> list[Row]:
    reader = spark.read.format("spoolmq").option("spoolmq.endpoints", live.url)
    return reader.option("subscribe", topic).load().collect()


def micro_batch_ends(checkpoint: Path) -> list[dict[tuple[str, int], int]]:
    """The source's end offsets of every committed micro-batch (Spark's offset log)."""
    ends = []
    for commit in sorted(
        int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit()
    ):
        offsets = json.loads((checkpoint / "offsets" / str(commit)).read_text().splitlines()[-1])
        ends.append({(t, int(q)): o for t, queues in offsets.items() for q, o in queues.items()})
    return ends


def paid_counts(orders: list[Row], end: dict[tuple[str, int], int]) -> dict[str, int]:
    """Paid orders per customer among the messages below ``end``."""
    counted: Counter[str] = Counter()
    for row in orders:
        if row.queue_offset < end.get((row.topic, row.queue_id), 0) and row.tags == "Paid":
            counted[row.properties["customer"]] += 1
    return dict(counted)


def test_the_transform_counts_paid_orders_per_customer(spark: SparkSession) -> None:
    orders = spark.createDataFrame(
        [("Paid", {"customer": "a"}), ("Paid", {"customer": "a"}), ("Shipped", {"customer": "a"}),
         ("Paid", {"customer": "b"}), ("Paid", {}), (None, {"customer": "c"})],
        "tags string, properties map<string,string>",
    )  # fmt: skip
    rows = paid_per_customer(orders).collect()
    assert sorted((r.key, json.loads(r.value)["paid"], r.tags) for r in rows) == [
        ("a", 2, "PaidCount"), ("b", 1, "PaidCount"),
    ]  # fmt: skip

"""The ``spoolmq`` source in a real local Spark against a real server: micro-batches bounded
by ``maxOffsetsPerTrigger`` that read every message once, new queues and topics picked up
after a restart from the checkpoint, a position held where a queue fell below it (a
failover), bounded batch reads, and clear errors."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
from pyspark.errors import PySparkException
from pyspark.sql import Row, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

from spark_jobs.streaming.options import parse_source_options
from spark_jobs.streaming.source import SpoolmqStreamReader
from tests.app.auth_support import start_auth_server
from tests.conftest import LiveServer, wait_until
from tests.spark_jobs.streaming.available_now import run_available_now


def send_to_queues(http: httpx.Client, topic: str, counts: dict[int, int]) -> dict[int, list[str]]:
    """``counts[q]`` messages into queue q (one batch each); the bodies per queue."""
    bodies: dict[int, list[str]] = {}
    for queue_id, count in counts.items():
        bodies[queue_id] = [f"{topic}-{queue_id}-{i}" for i in range(count)]
        messages = [
            {
                "body": b,
                "keys": [f"k{i}"],
                "tags": "Paid" if i % 2 else "Open",
                "properties": {"n": str(i)},
            }
            for i, b in enumerate(bodies[queue_id])
        ]
        answer = http.post(
            f"/v1/topics/{topic}/messages", json={"messages": messages, "queue_id": queue_id}
        )
        assert answer.status_code == 201, answer.text
    return bodies


def test_micro_batches_are_bounded_and_read_every_message_once(
    spark: SparkSession, live_server: LiveServer, tmp_path: Path
) -> None:
    http = live_server.client()
    topic, group = f"Flow{uuid.uuid4().hex[:8]}", f"G{uuid.uuid4().hex[:8]}"
    http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 8, "read_queue_nums": 8})
    counts = {q: 10 + 15 * q for q in range(8)}  # 500 messages, unevenly spread
    bodies = send_to_queues(http, topic, counts)
    options = {
        "spoolmq.endpoints": live_server.url,
        "subscribePattern": f"{topic}.*",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "64",
        "maxOffsetsPerPartition": "20",
        "consumerGroup": group,
    }
    run = run_available_now(spark, options, tmp_path / "chk")
    assert run.error is None
    batches, progress = run.batches, run.progress

    assert all(len(rows) <= 64 for rows in batches)
    assert sum(len(rows) for rows in batches) == 500 and len(batches) == 8  # ceil(500 / 64)
    seen = [(r.queue_id, r.queue_offset) for rows in batches for r in rows]
    assert sorted(seen) == sorted((q, o) for q, n in counts.items() for o in range(n))
    by_place = {(r.queue_id, r.queue_offset): r for rows in batches for r in rows}
    row = by_place[(3, 5)]
    assert (bytes(row.value), row.key, row.keys, row.tags, row.topic) == (
        bodies[3][5].encode(), "k5", ["k5"], "Paid", topic,
    )  # fmt: skip
    assert row.properties["n"] == "5" and "UNIQ_KEY" in row.properties
    stored = http.get(f"/v1/messages/{row.msg_id}").json()
    assert round(row.store_timestamp.timestamp() * 1000) == stored["store_timestamp"]
    assert round(row.born_timestamp.timestamp() * 1000) == stored["born_timestamp"]
    assert row.broker_group is None
    latest = json.loads(progress[-1]["sources"][0]["latestOffset"])  # reportLatestOffset
    assert latest == {topic: {str(q): n for q, n in counts.items()}}

    # Restarted from its checkpoint: new messages, two new queues and a new topic matching
    # the pattern are read from their start; nothing read before comes again.
    http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 10, "read_queue_nums": 10})
    send_to_queues(http, topic, {0: 3, 9: 4})
    send_to_queues(http, f"{topic}New", {0: 2})
    more = run_available_now(spark, options, tmp_path / "chk")
    again = sorted((r.topic, r.queue_id, r.queue_offset) for r in more.rows)
    assert again == sorted(
        [(topic, 0, o) for o in range(10, 13)]
        + [(topic, 9, o) for o in range(4)]
        + [(f"{topic}New", 0, o) for o in range(2)]
    )
    lag = http.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()
    committed = {q["queue_id"]: q["committed_offset"] for q in lag["topics"][0]["queues"]}
    assert committed[3] == counts[3]  # the group follows the query's progress


def test_a_queue_below_the_querys_position_holds_it_until_it_passes_it_again(
    live_server: LiveServer,
) -> None:
    """After a failover dropped messages nobody acknowledged, the promoted slave's queue ends
    below where the query got to: the query waits there rather than read anything twice."""
    http = live_server.client()
    topic = f"Held{uuid.uuid4().hex[:8]}"
    http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 1, "read_queue_nums": 1})
    send_to_queues(http, topic, {0: 5})
    options = {"spoolmq.endpoints": live_server.url, "subscribe": topic}
    reader = SpoolmqStreamReader(parse_source_options(options, streaming=True))
    try:
        beyond = {topic: {"0": 8}}  # the query had read 8 on the master that died
        assert reader.latestOffset(beyond, ReadAllAvailable()) == beyond
        assert reader.partitions(beyond, beyond) == []
        send_to_queues(http, topic, {0: 5})  # the queue passes the position again
        assert reader.latestOffset(beyond, ReadAllAvailable()) == {topic: {"0": 10}}
        [partition] = reader.partitions(beyond, {topic: {"0": 10}})
        offsets = [r["queue_offset"] for b in reader.read(partition) for r in b.to_pylist()]
        assert offsets == [8, 9]
    finally:
        reader.stop()


def test_a_trigger_with_nothing_new_waits_for_an_arrival_with_the_brokers_long_poll(
    live_server: LiveServer,
) -> None:
    http = live_server.client()
    topic = f"Idle{uuid.uuid4().hex[:8]}"
    http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 2, "read_queue_nums": 2})
    send_to_queues(http, topic, {0: 3})
    options = {"spoolmq.endpoints": live_server.url, "subscribe": topic, "headWaitMs": "10000"}
    reader = SpoolmqStreamReader(parse_source_options(options, streaming=True))
    head = {topic: {"0": 3, "1": 0}}
    try:
        parked = live_server.broker.waiters.parked
        latest: list[dict[str, Any]] = []
        trigger = threading.Thread(
            target=lambda: latest.append(reader.latestOffset(head, ReadAllAvailable()))
        )
        trigger.start()
        wait_until(lambda: live_server.broker.waiters.parked == parked + 2)  # both queues
        send_to_queues(http, topic, {1: 2})
        trigger.join(60)
        assert latest == [{topic: {"0": 3, "1": 2}}]
    finally:
        reader.stop()
    options["headWaitMs"] = "0"  # no wait: Spark's trigger loop alone asks again
    unwaited = SpoolmqStreamReader(parse_source_options(options, streaming=True))
    try:
        now = {topic: {"0": 3, "1": 2}}
        assert unwaited.latestOffset(now, ReadAllAvailable()) == now
    finally:
        unwaited.stop()


def batch_read(spark: SparkSession, url: str, **options: str) -> list[Row]:
    frame = spark.read.format("spoolmq").option("spoolmq.endpoints", url).options(**options)
    return frame.load().collect()


def test_a_batch_read_between_offsets_times_and_tags(
    spark: SparkSession, live_server: LiveServer
) -> None:
    http = live_server.client()
    topic = f"Range{uuid.uuid4().hex[:8]}"
    http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 2, "read_queue_nums": 2})
    send_to_queues(http, topic, {0: 30, 1: 10})
    # Store times are in ms: the later messages must come a millisecond after the others.
    middle = datetime.now(UTC) + timedelta(milliseconds=1)
    wait_until(lambda: datetime.now(UTC) > middle)
    send_to_queues(http, topic, {1: 5})

    everything = batch_read(spark, live_server.url, subscribe=topic)
    assert len(everything) == 45
    window = batch_read(
        spark,
        live_server.url,
        assign=f'{{"{topic}": [0]}}',
        startingOffsets=f'{{"{topic}": {{"0": 5}}}}',
        endingOffsets=f'{{"{topic}": {{"0": 12}}}}',
        maxOffsetsPerPartition="3",
    )
    assert sorted(r.queue_offset for r in window) == list(range(5, 12))
    recent = batch_read(
        spark, live_server.url, subscribe=topic, startingTimestamp=middle.isoformat()
    )
    assert sorted((r.queue_id, r.queue_offset) for r in recent) == [(1, o) for o in range(10, 15)]
    paid = batch_read(spark, live_server.url, subscribe=topic, tags="Paid")
    assert len(paid) == 15 + 5 + 2 and {r.tags for r in paid} == {"Paid"}
    # a SQL92 filter is pushed down to the broker, which skips what does not match
    small = batch_read(spark, live_server.url, subscribe=topic, filter="n < 3 AND TAGS = 'Open'")
    assert sorted((r.queue_id, r.properties["n"]) for r in small) == [
        (0, "0"),
        (0, "2"),
        (1, "0"),
        (1, "0"),
        (1, "2"),
        (1, "2"),
    ]


def failure(action: Callable[[], object]) -> str:
    with pytest.raises((PySparkException, Py4JJavaError)) as caught:
        action()
    return str(caught.value)


def test_errors_name_the_problem(spark: SparkSession, tmp_path: Path, free_port: int) -> None:
    server = start_auth_server(tmp_path)
    try:
        missing = failure(lambda: batch_read(spark, server.url, subscribe="SecMissing", **{
            "spoolmq.token": server.tokens["admin"]}))  # fmt: skip
        assert "topic 'SecMissing' does not exist" in missing
        refused = failure(lambda: batch_read(spark, server.url, subscribe="SecOrders", **{
            "spoolmq.token": "wrong"}))  # fmt: skip
        assert "refused the token (401" in refused
    finally:
        server.stop()
    down = failure(lambda: batch_read(spark, f"http://127.0.0.1:{free_port}", subscribe="T", **{
        "spoolmq.retries": "2", "spoolmq.retryBackoffMs": "10"}))  # fmt: skip
    assert "no answer after 3 attempts" in down and "Is spoolmq running there?" in down
    bad = failure(lambda: batch_read(spark, "http://127.0.0.1:1", subscribe="A", assign="{}"))
    assert "exactly one of subscribe" in bad

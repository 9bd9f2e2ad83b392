"""Across a cluster, from outside: a streaming query on a standalone Spark master + worker
reads a topic and writes another through ``spoolmq proxy`` (real etcd, elected brokers in
two groups), and a group's master is killed with -9 between its micro-batches' writes: the
sink's keyed batches in flight go again to the promoted slave, which holds their keys.
Nothing is lost and nothing is written twice."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from pyspark.sql import SparkSession

from tests.app.test_cluster_proxy import Deployment, masters
from tests.conftest import wait_until
from tests.spark_jobs.streaming.processes import (
    FAST_SPARK,
    child_env,
    messages_in,
    standalone_spark,
    start_query,
)

COPY = "tests.spark_jobs.streaming.copy_query"


def send_all(http: httpx.Client, topic: str, bodies: list[str], queues: int) -> None:
    """Send each body to queue i % queues through the proxy; a 503 (a group without a
    master: nothing was written) is tried again."""
    for i, body in enumerate(bodies):
        deadline = time.monotonic() + 60
        while True:
            answer = http.post(
                f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": i % queues}
            )
            if answer.status_code == 201:
                break
            assert answer.status_code == 503 and time.monotonic() < deadline, answer.text
            time.sleep(0.1)


def test_a_query_through_the_proxy_loses_and_repeats_nothing_when_a_master_dies(
    deployment: Deployment,
    spark: SparkSession,
    spark_env: dict[str, str],
    tmp_path: Path,
) -> None:
    proxy, g1_master, http = deployment.proxy, deployment.g1_a, deployment.http
    wait_until(lambda: masters(http) == {"g1": "g1-a", "g2": "g2-a"}, timeout=30)
    for topic in ("In", "Out"):
        created = http.put(
            f"/v1/topics/{topic}", json={"write_queue_nums": 4, "read_queue_nums": 4}
        )
        assert created.status_code == 201, created.text

    def g1_in_sync() -> bool:
        route = httpx.get(f"{g1_master.url}/v1/topics/In/route", timeout=10).json()
        groups = {g["group"]: g for g in route["groups"]}
        return "g1-b" in groups.get("g1", {}).get("in_sync", ())

    wait_until(g1_in_sync, timeout=30)
    before, after = [f"before-{i}" for i in range(200)], [f"after-{i}" for i in range(120)]
    send_all(http, "In", before, 4)

    env = child_env(spark_env)
    with standalone_spark(tmp_path / "spark", env) as master_url:
        args = [
            "--endpoint", proxy.url, "--topic", "In", "--checkpoint", str(tmp_path / "chk"),
            "--to", "spoolmq:Out", "--max-offsets-per-trigger", "40", *FAST_SPARK,
        ]  # fmt: skip
        query = start_query(COPY, args, env, tmp_path / "query.log", spark_submit=master_url)
        try:
            # 40 messages a micro-batch: the kill -9 comes after the first batch is written
            # and before the last one is.
            written: list[int] = []

            def first_batch_written() -> bool:
                written.append(messages_in(proxy.url, "Out"))
                return written[-1] >= 40

            wait_until(first_batch_written, timeout=240)
            g1_master.kill()
            send_all(http, "In", after, 4)  # g1's queues answer 503 until g1-b takes over
            assert masters(http)["g1"] == "g1-b"
            wait_until(lambda: messages_in(proxy.url, "Out") >= len(before) + len(after), 240)
        finally:
            query.kill()
        assert query.process.returncode != 0  # it was running until killed
    assert written[-1] < len(before)  # the master died in the middle of the copy

    rows = (
        spark.read.format("spoolmq")
        .option("spoolmq.endpoints", proxy.url)
        .option("subscribe", "Out")
        .load()
        .collect()
    )
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(before + after)
    assert {r.broker_group for r in rows} == {"g1", "g2"}

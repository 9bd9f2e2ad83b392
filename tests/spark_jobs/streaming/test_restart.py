"""A streaming query killed with -9 mid-stream and started again from its checkpoint: the
Parquet files it wrote hold every message exactly once."""

from __future__ import annotations

import uuid
from pathlib import Path

from pyspark.sql import SparkSession

from tests.conftest import LiveServer, wait_until
from tests.spark_jobs.streaming.processes import (
    FAST_SPARK,
    checkpoint_batches,
    child_env,
    start_query,
)

COPY = "tests.spark_jobs.streaming.copy_query"


def test_a_killed_query_goes_on_from_its_checkpoint_and_writes_each_message_once(
    spark: SparkSession, live_server: LiveServer, spark_env: dict[str, str], tmp_path: Path
) -> None:
    http = live_server.client()
    topic = f"Kill{uuid.uuid4().hex[:8]}"
    http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 8, "read_queue_nums": 8})
    bodies = [f"order-{i}" for i in range(500)]
    for start in range(0, len(bodies), 250):
        batch = [{"body": b} for b in bodies[start : start + 250]]
        answer = http.post(f"/v1/topics/{topic}/messages", json={"messages": batch})
        assert answer.status_code == 201, answer.text
    out, checkpoint = tmp_path / "out", tmp_path / "chk"
    args = [
        "--endpoint", live_server.url, "--topic", topic, "--checkpoint", str(checkpoint),
        "--to", f"parquet:{out}", "--max-offsets-per-trigger", "100", "--every", "100 milliseconds",
        "--master", "local[2]", *FAST_SPARK,
    ]  # fmt: skip
    env = child_env(spark_env)

    first = start_query(COPY, args, env, tmp_path / "first.log")
    try:
        # Killed while a micro-batch is planned but not committed, after a few are done.
        def mid_batch() -> bool:
            planned, committed = checkpoint_batches(checkpoint)
            return committed >= 1 and planned > committed

        wait_until(mid_batch, timeout=180)
    finally:
        first.kill()
    _, committed = checkpoint_batches(checkpoint)
    assert committed < 5, "the query finished before it was killed"

    second = start_query(COPY, [*args, "--available-now"], env, tmp_path / "second.log")
    assert second.finish(timeout=240) == 0, second.output()

    written = spark.read.parquet(str(out)).select("value", "queue_id", "queue_offset").collect()
    assert sorted(bytes(r.value).decode() for r in written) == sorted(bodies)
    assert len({(r.queue_id, r.queue_offset) for r in written}) == len(bodies)

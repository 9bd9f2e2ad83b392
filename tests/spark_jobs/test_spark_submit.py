"""A job run through ``spark-submit`` in local mode, as on a cluster (one JVM of its own)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]

import spark_jobs.replay.__main__ as replay_script
from tests.spark_jobs.stores import expected_row, sorted_rows, varied_store

# Variables that would point a child at this process's own Spark gateway.
_GATEWAY_VARIABLES = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")


def test_replay_runs_under_spark_submit(
    tmp_path: Path, spark_env: dict[str, str], venv_bin: Path
) -> None:
    written = varied_store(tmp_path / "store", count=200)
    out = tmp_path / "orders.parquet"
    command = [
        str(venv_bin / "spark-submit"),
        "--master", "local[2]",
        "--conf", "spark.ui.enabled=false",
        "--conf", f"spark.local.dir={tmp_path / 'spark-local'}",
        "--driver-java-options", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        replay_script.__file__,
        "--store", str(tmp_path / "store"),
        "--topic", "Orders",
        "--split-size", "16k",
        "--to", f"parquet:{out}",
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in _GATEWAY_VARIABLES}
    result = subprocess.run(
        command,
        env={**env, **spark_env},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = [expected_row(w) for w in written if w.message.topic == "Orders"]
    assert f"wrote {len(expected):,} messages to {out}" in result.stdout
    assert sorted_rows(pq.read_table(out).to_pylist()) == expected

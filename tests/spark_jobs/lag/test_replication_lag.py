"""The Spark lag job reads a slave's store: CommitLog replicated byte for byte from a master
(the HA path, ``append_replicated``), consumer offsets copied as the config sync does."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from spark_jobs.lag.job import LagReportConfig, run_lag_report
from storage import Message, MessageStore
from storage.config_managers import ConsumerOffsetManager
from tests.spark_jobs.stores import CONFIG


def test_lag_report_of_a_slave_equals_the_masters(spark: SparkSession, tmp_path: Path) -> None:
    master_dir, slave_dir = tmp_path / "master", tmp_path / "slave"
    with (
        MessageStore.open(master_dir, CONFIG) as master,
        MessageStore.open(slave_dir, CONFIG) as slave,
    ):
        for i in range(300):
            master.put([Message("Orders", b"o" * 300, queue_id=i % 2)])
        offset = 0
        while data := master.read_replication_chunk(offset):
            offset = slave.append_replicated(offset, data)
        assert slave.max_physical_offset == master.max_physical_offset > CONFIG.commit_log_file_size
    offsets = ConsumerOffsetManager(master_dir / "config")
    offsets.commit_offset("billing", "Orders", 0, 100)
    offsets.commit_offset("billing", "Orders", 1, 150)
    offsets.persist()
    ConsumerOffsetManager(slave_dir / "config").replace_from_json(offsets.to_json())

    now = 1 << 42
    reports = {
        name: run_lag_report(
            spark,
            LagReportConfig(
                stores=(str(root.resolve()),), out=str(tmp_path / f"out-{name}"), now_ms=now
            ),
        )
        for name, root in (("master", master_dir), ("slave", slave_dir))
    }
    rows = {
        name: sorted(
            (
                q.snapshot.group,
                q.snapshot.topic,
                q.snapshot.queue_id,
                q.snapshot.max_offset,
                q.snapshot.lag,
            )
            for q in report.queues
        )
        for name, report in reports.items()
    }
    assert rows["slave"] == rows["master"]
    assert ("billing", "Orders", 0, 150, 50) in rows["slave"]
    assert ("billing", "Orders", 1, 150, 0) in rows["slave"]

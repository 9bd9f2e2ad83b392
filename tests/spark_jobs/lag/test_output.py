"""output: a report's tables as records and CSV (no Spark)."""

from __future__ import annotations

import csv
from pathlib import Path

from spark_jobs.lag.output import (
    GROUP_COLUMNS,
    QUEUE_COLUMNS,
    iso_utc,
    report_records,
    utc_date,
    write_csv,
)
from spark_jobs.lag.report import evaluate
from spark_jobs.lag.snapshot import take_snapshot
from tests.spark_jobs.lag.conftest import KnownStore


def test_records_carry_every_column_and_csv_writes_them_as_text(
    known_store: KnownStore, tmp_path: Path
) -> None:
    report = evaluate(take_snapshot([known_store.store_dir], known_store.now), {})
    queues, groups, history = report_records(report)
    assert len(queues) == len(history) == len(report.queues) and len(groups) == 3
    assert all({name for name, _ in QUEUE_COLUMNS} <= set(record) for record in queues)
    billing = next(
        q for q in queues if (q["group"], q["topic"], q["queue_id"]) == ("billing", "Orders", 0)
    )
    assert (billing["lag_messages"], billing["committed_offset"], billing["status"]) == (6, 4, "OK")
    path = tmp_path / "out" / "groups.csv"
    write_csv(path, GROUP_COLUMNS, groups)
    rows = list(csv.DictReader(path.read_text().splitlines()))
    assert [name for name, _ in GROUP_COLUMNS] == list(rows[0])
    assert {row["group"] for row in rows} == {"billing", "audit", "ghost"}


def test_times_in_utc() -> None:
    assert utc_date(1_714_564_800_000) == "2024-05-01"
    assert iso_utc(1_714_564_800_000).startswith("2024-05-01T12:00:00")
    assert iso_utc(None) == ""

"""The lag report's tables as plain records: columns, types and CSV files (no pyspark).

Three tables share these column specs: ``queues`` and ``groups`` (the report, written as
Parquet by Spark and as CSV here) and ``history`` (one row per queue and run, appended to the
history Parquet dataset, partitioned by ``date``). Times are epoch milliseconds in the records;
Parquet gets timestamps, CSV gets ISO 8601 UTC text.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from spark_jobs.lag.report import GroupLag, LagReport, QueueLag

Column = tuple[str, str]
"""(name, type): type is string, int, long, double, bool or timestamp (ms in records)."""

QUEUE_COLUMNS: Final[tuple[Column, ...]] = (
    ("snapshot_time", "timestamp"),
    ("store_dir", "string"),
    ("group", "string"),
    ("topic", "string"),
    ("topic_kind", "string"),
    ("queue_id", "int"),
    ("min_offset", "long"),
    ("max_offset", "long"),
    ("committed_offset", "long"),
    ("never_committed", "bool"),
    ("position", "long"),
    ("lag_messages", "long"),
    ("in_flight", "long"),
    ("lag_seconds", "double"),
    ("oldest_unconsumed_time", "timestamp"),
    ("last_commit_time", "timestamp"),
    ("status", "string"),
    ("consume_rate", "double"),
    ("produce_rate", "double"),
    ("time_to_drain_seconds", "double"),
    ("window_snapshots", "int"),
    ("data_loss", "bool"),
)

GROUP_COLUMNS: Final[tuple[Column, ...]] = (
    ("snapshot_time", "timestamp"),
    ("group", "string"),
    ("status", "string"),
    ("total_lag", "long"),
    ("max_lag", "long"),
    ("max_lag_store_dir", "string"),
    ("max_lag_topic", "string"),
    ("max_lag_queue_id", "int"),
    ("max_lag_seconds", "double"),
    ("queues", "int"),
    ("never_committed_queues", "int"),
    ("consume_rate", "double"),
    ("produce_rate", "double"),
    ("time_to_drain_seconds", "double"),
    ("retry_depth", "long"),
    ("dlq_depth", "long"),
    ("last_commit_time", "timestamp"),
    ("complete", "double"),
)

HISTORY_COLUMNS: Final[tuple[Column, ...]] = (
    ("snapshot_ms", "long"),
    ("store_dir", "string"),
    ("group", "string"),
    ("topic", "string"),
    ("topic_kind", "string"),
    ("queue_id", "int"),
    ("min_offset", "long"),
    ("max_offset", "long"),
    ("committed_offset", "long"),
    ("position", "long"),
    ("lag", "long"),
    ("lag_seconds", "double"),
    ("last_commit_ms", "long"),
    ("status", "string"),
    ("date", "string"),
)
"""History rows; ``date`` (UTC, ``YYYY-MM-DD``) is the partition column."""


def utc_date(milliseconds: int) -> str:
    """``YYYY-MM-DD`` of a time, in UTC."""
    return datetime.fromtimestamp(milliseconds / 1000, UTC).strftime("%Y-%m-%d")


def iso_utc(milliseconds: int | None) -> str:
    """``2024-05-01T12:00:00.000Z`` (empty for None)."""
    if milliseconds is None:
        return ""
    moment = datetime.fromtimestamp(milliseconds / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{milliseconds % 1000:03d}Z"


def queue_record(queue: QueueLag) -> dict[str, Any]:
    """A ``queues`` row."""
    row = queue.snapshot
    return {
        "snapshot_time": row.snapshot_ms,
        "store_dir": row.store_dir,
        "group": row.group,
        "topic": row.topic,
        "topic_kind": row.topic_kind,
        "queue_id": row.queue_id,
        "min_offset": row.min_offset,
        "max_offset": row.max_offset,
        "committed_offset": row.committed_offset,
        "never_committed": row.never_committed,
        "position": row.position,
        "lag_messages": row.lag,
        "in_flight": row.in_flight,
        "lag_seconds": row.lag_seconds,
        "oldest_unconsumed_time": row.oldest_unconsumed_ms,
        "last_commit_time": row.last_commit_ms,
        "status": queue.status.value,
        "consume_rate": queue.rates.consume,
        "produce_rate": queue.rates.produce,
        "time_to_drain_seconds": queue.time_to_drain_seconds,
        "window_snapshots": queue.window_entries,
        "data_loss": row.data_loss,
    }


def group_record(group: GroupLag, now_ms: int) -> dict[str, Any]:
    """A ``groups`` row."""
    top = group.max_lag
    return {
        "snapshot_time": now_ms,
        "group": group.group,
        "status": group.status.value,
        "total_lag": group.total_lag,
        "max_lag": top.lag if top else None,
        "max_lag_store_dir": top.store_dir if top else None,
        "max_lag_topic": top.topic if top else None,
        "max_lag_queue_id": top.queue_id if top else None,
        "max_lag_seconds": group.max_lag_seconds,
        "queues": group.queues,
        "never_committed_queues": group.never_committed_queues,
        "consume_rate": group.rates.consume,
        "produce_rate": group.rates.produce,
        "time_to_drain_seconds": group.time_to_drain_seconds,
        "retry_depth": group.retry_depth,
        "dlq_depth": group.dlq_depth,
        "last_commit_time": group.last_commit_ms,
        "complete": group.complete,
    }


def history_record(queue: QueueLag) -> dict[str, Any]:
    """A ``history`` row."""
    row = queue.snapshot
    return {
        "snapshot_ms": row.snapshot_ms,
        "store_dir": row.store_dir,
        "group": row.group,
        "topic": row.topic,
        "topic_kind": row.topic_kind,
        "queue_id": row.queue_id,
        "min_offset": row.min_offset,
        "max_offset": row.max_offset,
        "committed_offset": row.committed_offset,
        "position": row.position,
        "lag": row.lag,
        "lag_seconds": row.lag_seconds,
        "last_commit_ms": row.last_commit_ms,
        "status": queue.status.value,
        "date": utc_date(row.snapshot_ms),
    }


def report_records(
    report: LagReport,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(queues, groups, history) records of a report."""
    queues = [queue_record(q) for q in report.queues]
    groups = [group_record(g, report.now_ms) for g in report.groups]
    history = [history_record(q) for q in report.queues]
    return queues, groups, history


def _csv_value(value: Any, kind: str) -> str:
    if value is None:
        return ""
    if kind == "timestamp":
        return iso_utc(int(value))
    if kind == "bool":
        return "true" if value else "false"
    if kind == "double":
        return f"{float(value):.3f}"
    return str(value)


def write_csv(path: Path, columns: Sequence[Column], records: Iterable[dict[str, Any]]) -> None:
    """One CSV file with a header row; times as ISO 8601 UTC, empty cells for unknowns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow([name for name, _ in columns])
        for record in records:
            writer.writerow([_csv_value(record.get(name), kind) for name, kind in columns])

"""``spoolmq-spark lag-report``: consumer lag per group, topic and queue, with Burrow statuses.

    spoolmq-spark lag-report --store DIR [--store DIR ...] --out DIR [--history DIR]
    spark-submit spark_jobs/lag/__main__.py --store DIR --out DIR --history DIR

Each run reads the stores' ConsumeQueue files and ``consumerOffset.json`` (read-only), takes a
snapshot, evaluates each queue's status over its last ``--window`` snapshots from the history,
appends the snapshot to the history (Parquet, partitioned by ``date``), and writes to ``--out``:
``queues.parquet/``, ``groups.parquet/``, ``queues.csv``, ``groups.csv`` and ``report.html``.
``--out`` and the CSV/HTML files are written by the driver; on a cluster give paths that the
driver and executors share.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.formatting import format_duration
from spark_jobs.lag.burrow import DEFAULT_WINDOW, Status, WindowEntry
from spark_jobs.lag.output import (
    GROUP_COLUMNS,
    HISTORY_COLUMNS,
    QUEUE_COLUMNS,
    Column,
    report_records,
    utc_date,
    write_csv,
)
from spark_jobs.lag.report import LagReport, evaluate, group_totals
from spark_jobs.lag.report_html import render_report
from spark_jobs.lag.snapshot import KIND_NORMAL, QueueKey, take_snapshot
from spark_jobs.options import OptionError, job_main, parse_time_ms
from spark_jobs.session import build_session, parse_conf
from storage.errors import ConfigFileError

_TYPES: dict[str, DataType] = {
    "string": StringType(),
    "int": IntegerType(),
    "long": LongType(),
    "double": DoubleType(),
    "bool": BooleanType(),
    "timestamp": TimestampType(),
}
_DAY_MS = 86_400_000
DESCRIPTION = "Consumer lag per group, topic and queue, with Burrow statuses and an HTML report."


@dataclass(frozen=True, slots=True)
class LagReportConfig:
    """What one lag-report run reads and writes."""

    stores: tuple[str, ...]
    out: str
    history: str | None = None
    window: int = DEFAULT_WINDOW
    now_ms: int | None = None
    history_days: float = 7.0  # snapshots older than this never enter a window
    chart_hours: float = 24.0
    top: int = 25


def spark_schema(columns: Sequence[Column]) -> StructType:
    """The Spark schema of a table spec (every column nullable)."""
    return StructType([StructField(name, _TYPES[kind], True) for name, kind in columns])


def _spark_value(value: Any, kind: str) -> Any:
    if value is None or kind != "timestamp":
        return value
    return datetime.fromtimestamp(int(value) / 1000, UTC)


def records_frame(
    spark: SparkSession, columns: Sequence[Column], records: Sequence[dict[str, Any]]
) -> DataFrame:
    """A DataFrame of records (timestamps given in ms)."""
    rows = [tuple(_spark_value(r.get(name), kind) for name, kind in columns) for r in records]
    return spark.createDataFrame(rows, spark_schema(columns))


def _history_missing(history: str) -> bool:
    """Whether a local history path does not exist yet (a remote one is just tried)."""
    if "://" in history and not history.startswith("file:"):
        return False
    return not Path(history.removeprefix("file:")).exists()


def _read_history(spark: SparkSession, history: str) -> DataFrame | None:
    if _history_missing(history):
        return None  # the first run: nothing to read (and no noisy Spark warning)
    try:
        return spark.read.schema(spark_schema(HISTORY_COLUMNS)).parquet(history)
    except AnalysisException:
        return None  # no history yet


def read_windows(
    spark: SparkSession, history: str, now_ms: int, window: int, history_days: float
) -> dict[QueueKey, list[WindowEntry]]:
    """Each queue's last ``window - 1`` snapshots before ``now_ms`` from the history."""
    frame = _read_history(spark, history)
    if frame is None or window <= 1:
        return {}
    since = now_ms - int(history_days * _DAY_MS)
    recent = frame.where(
        (F.col("date") >= utc_date(since))
        & (F.col("snapshot_ms") >= since)
        & (F.col("snapshot_ms") < now_ms)
    )
    key = ["store_dir", "group", "topic", "queue_id"]
    ranked = recent.withColumn(
        "_rank", F.row_number().over(Window.partitionBy(*key).orderBy(F.col("snapshot_ms").desc()))
    ).where(F.col("_rank") < window)
    windows: dict[QueueKey, list[WindowEntry]] = defaultdict(list)
    for row in ranked.select(
        *key, "snapshot_ms", "position", "lag", "max_offset", "last_commit_ms"
    ).collect():
        windows[(row.store_dir, row.group, row.topic, row.queue_id)].append(
            WindowEntry(row.snapshot_ms, row.position, row.lag, row.max_offset, row.last_commit_ms)
        )
    return {k: sorted(v, key=lambda e: e.snapshot_ms) for k, v in windows.items()}


def read_chart_series(
    spark: SparkSession,
    history: str | None,
    now_ms: int,
    chart_hours: float,
    stores: Sequence[str] = (),
) -> dict[str, dict[int, int]]:
    """Total lag of each group's normal queues (on ``stores``, default all) per past snapshot
    inside the chart window."""
    if history is None:
        return {}
    frame = _read_history(spark, history)
    if frame is None:
        return {}
    since = now_ms - int(chart_hours * 3_600_000)
    if stores:
        frame = frame.where(F.col("store_dir").isin(list(stores)))
    totals = (
        frame.where(
            (F.col("date") >= utc_date(since))
            & (F.col("snapshot_ms") >= since)
            & (F.col("snapshot_ms") < now_ms)
            & (F.col("topic_kind") == KIND_NORMAL)
        )
        .groupBy("group", "snapshot_ms")
        .agg(F.sum("lag").alias("lag"))
        .collect()
    )
    series: dict[str, dict[int, int]] = defaultdict(dict)
    for row in totals:
        series[row.group][row.snapshot_ms] = int(row.lag)
    return dict(series)


def write_outputs(
    spark: SparkSession, report: LagReport, config: LagReportConfig
) -> dict[str, Path]:
    """Parquet (Spark), CSV and HTML (driver) outputs, and the history append."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    queues, groups, history = report_records(report)
    paths = {
        "queues.parquet": out / "queues.parquet",
        "groups.parquet": out / "groups.parquet",
        "queues.csv": out / "queues.csv",
        "groups.csv": out / "groups.csv",
    }
    for name, columns, records in (
        ("queues.parquet", QUEUE_COLUMNS, queues),
        ("groups.parquet", GROUP_COLUMNS, groups),
    ):
        records_frame(spark, columns, records).coalesce(1).write.mode("overwrite").parquet(
            str(paths[name])
        )
    write_csv(paths["queues.csv"], QUEUE_COLUMNS, queues)
    write_csv(paths["groups.csv"], GROUP_COLUMNS, groups)
    if config.history is not None and history:
        records_frame(spark, HISTORY_COLUMNS, history).coalesce(1).write.mode("append").partitionBy(
            "date"
        ).parquet(config.history)
    return paths


def run_lag_report(spark: SparkSession, config: LagReportConfig) -> LagReport:
    """Snapshot, evaluate over the history, write every output; returns the report."""
    started = time.monotonic()
    now_ms = config.now_ms if config.now_ms is not None else time.time_ns() // 1_000_000
    snapshot = take_snapshot(list(config.stores), now_ms)
    _progress(
        started, f"snapshot of {len(snapshot.queues):,} queues, {len(snapshot.groups)} groups"
    )
    windows = (
        read_windows(spark, config.history, now_ms, config.window, config.history_days)
        if config.history
        else {}
    )
    report = evaluate(snapshot, windows, config.window)
    series = read_chart_series(spark, config.history, now_ms, config.chart_hours, config.stores)
    for group, points in group_totals(snapshot.queues).items():
        series.setdefault(group, {}).update(points)
    _progress(started, "history read" if config.history else "no history (--history)")
    write_outputs(spark, report, config)
    html = render_report(report, series, config.history, config.chart_hours, config.top)
    (Path(config.out) / "report.html").write_text(html, encoding="utf-8")
    _progress(started, f"outputs written to {config.out}")
    return report


def _progress(started: float, what: str) -> None:
    """A progress line on stderr (stdout keeps the summary)."""
    elapsed = format_duration(time.monotonic() - started)
    sys.stderr.write(f"lag-report: {what} · elapsed {elapsed}\n")
    sys.stderr.flush()


# --------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The lag-report options (shared by ``spoolmq-spark`` and ``spark-submit``)."""
    parser.add_argument(
        "--store",
        action="append",
        required=True,
        metavar="DIR",
        help="a store directory (repeat for several brokers)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the outputs")
    parser.add_argument(
        "--history", metavar="DIR", help="Parquet history of snapshots (appended each run, by date)"
    )
    parser.add_argument(
        "--window",
        type=int,
        default=DEFAULT_WINDOW,
        help="snapshots per status window (default %(default)s)",
    )
    parser.add_argument(
        "--now",
        metavar="TIME",
        help="evaluate as of this time (epoch ms or ISO 8601; default: now)",
    )
    parser.add_argument(
        "--history-days",
        type=float,
        default=7.0,
        help="ignore snapshots older than this (default %(default)s days)",
    )
    parser.add_argument(
        "--chart-hours",
        type=float,
        default=24.0,
        help="time span of the chart (default %(default)s hours)",
    )
    parser.add_argument("--top", type=int, default=25, help="rows in the worst-queues table")
    parser.add_argument(
        "--fail-on",
        choices=("never", "warn", "error"),
        default="never",
        help="exit with status 3 when a group is at least this bad",
    )
    parser.add_argument("--master", help="Spark master (default: local[*], or spark-submit's)")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE", help="Spark setting")


def config_from_args(args: argparse.Namespace) -> LagReportConfig:
    """The run configuration of parsed arguments."""
    if args.window < 1:
        raise OptionError("--window must be at least 1")
    return LagReportConfig(
        stores=tuple(str(Path(s).resolve()) for s in args.store),
        out=args.out,
        history=args.history,
        window=args.window,
        now_ms=parse_time_ms(args.now),
        history_days=args.history_days,
        chart_hours=args.chart_hours,
        top=args.top,
    )


def summary_lines(report: LagReport, out: str) -> list[str]:
    """One line per group (worst first), then where the outputs are."""
    when = datetime.fromtimestamp(report.now_ms / 1000, UTC)
    lines = [f"lag report at {when:%Y-%m-%d %H:%M:%S} UTC, {len(report.groups)} groups"]
    for group in sorted(report.groups, key=lambda g: (-g.status.severity, g.group)):
        oldest = format_duration(group.max_lag_seconds)  # as the HTML report and admin pages
        lines.append(
            f"  {group.status.value:<8} {group.group:<32} lag {group.total_lag:>12,} msg  "
            f"oldest {oldest:>12}  retry {group.retry_depth:,}  dlq {group.dlq_depth:,}"
        )
    lines.append(
        f"outputs in {out}: report.html, queues.csv, groups.csv, queues.parquet, groups.parquet"
    )
    return lines


def exit_code(report: LagReport, fail_on: str) -> int:
    """0, or 3 when a group reaches the ``--fail-on`` level."""
    if fail_on == "error" and any(g.status.is_error for g in report.groups):
        return 3
    if fail_on == "warn" and any(
        g.status.is_error or g.status is Status.WARN for g in report.groups
    ):
        return 3
    return 0


def run(args: argparse.Namespace, spark: SparkSession | None = None) -> int:
    """Run the job for parsed arguments (in ``spark``, or a session of its own)."""
    config = config_from_args(args)
    session = spark or build_session("spoolmq-lag-report", args.master, parse_conf(args.conf))
    try:
        report = run_lag_report(session, config)
    except ConfigFileError as exc:
        sys.stderr.write(f"lag report failed: {exc}\n")
        return 1
    sys.stdout.write("\n".join(summary_lines(report, config.out)) + "\n")
    return exit_code(report, args.fail_on)


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit spark_jobs/lag/__main__.py ...`` (or ``python -m spark_jobs.lag``)."""
    return job_main("spark_jobs.lag", DESCRIPTION, add_arguments, run, argv)

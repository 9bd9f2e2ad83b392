"""``spoolmq-spark latency``: delivery latency per topic and consumer group from message trace.

    spoolmq-spark latency --store DIR [--store DIR ...] --out DIR [--from TIME] [--to TIME]
    spoolmq-spark latency --broker http://127.0.0.1:8080 [--broker URL,URL ...] --out DIR
    spark-submit spark_jobs/latency/__main__.py --store DIR --out DIR

Reads the broker's trace records (the system topic ``RMQ_SYS_TRACE_TOPIC``: one CommitLog
message per batch of events, the body ``{"v": 1, "events": [...]}``) from store directories
(read-only) or from brokers over HTTP (range reads of the topic's queue; each ``--broker``
is one broker group, its replicas comma-separated). The messages stored inside ``[from, to)``
are followed through their ``delivered``, ``acked`` and ``dead_lettered`` events, whenever
those came; see :mod:`spark_jobs.latency.report` for the figures. Writes to ``--out``:
``latency.json``, ``latency.csv``, ``latency.parquet/`` and ``report.html``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_jobs.datasource import COMMITLOG_FORMAT
from spark_jobs.latency.report import (
    PERCENTILES,
    STAGES,
    LatencyReport,
    LatencyRow,
    LatencyStats,
    table_lines,
    write_csv,
    write_json,
)
from spark_jobs.latency.report_html import render_report
from spark_jobs.options import OptionError, job_main, parse_endpoints, parse_time_ms
from spark_jobs.session import build_session, parse_conf
from spark_jobs.streaming.datasource import SPOOLMQ_FORMAT
from storage.topic_names import GROUP_TOPIC_PREFIXES, TRACE_TOPIC

DESCRIPTION = (
    "Delivery latency per topic and consumer group (store -> first delivery -> ack, "
    "retries, dead letters) from the broker's message trace."
)

TRACE_BODY_SCHEMA = StructType(
    [
        StructField("v", IntegerType()),
        StructField(
            "events",
            ArrayType(
                StructType(
                    [
                        StructField("type", StringType()),
                        StructField("at", LongType()),
                        StructField("msg_id", StringType()),
                        StructField("topic", StringType()),
                        StructField("group", StringType()),
                        StructField("attempt", IntegerType()),
                        StructField(
                            "detail",
                            StructType(
                                [
                                    StructField("store_at", LongType()),
                                    StructField("delivered_at", LongType()),
                                ]
                            ),
                        ),
                    ]
                )
            ),
        ),
    ]
)
"""The part of a trace record's body the report reads (other fields are ignored)."""

READ_MARGIN_MS = 60_000
"""Trace records are written after their step: the read starts this much before ``from``
only so that a clock step back on the broker cannot hide a ``stored`` event."""


@dataclass(frozen=True, slots=True)
class LatencyConfig:
    """What one run reads and writes."""

    out: str
    stores: tuple[str, ...] = ()
    brokers: tuple[tuple[str, ...], ...] = ()  # each: the endpoints of one broker group
    token: str | None = None
    from_ms: int | None = None
    to_ms: int | None = None

    @property
    def sources(self) -> tuple[str, ...]:
        return self.stores + tuple(",".join(group) for group in self.brokers)


# --------------------------------------------------------------------------- reading


def trace_bodies(spark: SparkSession, config: LatencyConfig) -> DataFrame:
    """One ``body`` (binary) row per trace record of every source."""
    frames = []
    start_ms = None if config.from_ms is None else config.from_ms - READ_MARGIN_MS
    if config.stores:
        reader = (
            spark.read.format(COMMITLOG_FORMAT)
            .option("stores", ",".join(config.stores))
            .option("topics", TRACE_TOPIC)
        )
        if start_ms is not None:
            reader = reader.option("from_time", str(start_ms))
        frames.append(reader.load().select("body"))
    for endpoints in config.brokers:
        reader = (
            spark.read.format(SPOOLMQ_FORMAT)
            .option("spoolmq.endpoints", ",".join(endpoints))
            .option("subscribe", TRACE_TOPIC)
            .option("endingOffsets", "latest")
        )
        if config.token:
            reader = reader.option("spoolmq.token", config.token)
        reader = (
            reader.option("startingTimestamp", str(start_ms))
            if start_ms is not None
            else reader.option("startingOffsets", "earliest")
        )
        frames.append(reader.load().select(F.col("value").alias("body")))
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def trace_events(bodies: DataFrame) -> DataFrame:
    """One row per event: type, at, msg_id, topic, group, attempt, store_at, delivered_at.

    A body that is not a trace batch gives no rows; an event that occurs in two records (a
    record read from two replicas of one group) counts once.
    """
    parsed = bodies.select(
        F.from_json(F.col("body").cast("string"), TRACE_BODY_SCHEMA).alias("record")
    )
    events = parsed.select(F.explode_outer("record.events").alias("e")).where(
        F.col("e").isNotNull()
    )
    return events.select(
        "e.type",
        "e.at",
        "e.msg_id",
        "e.topic",
        "e.group",
        "e.attempt",
        F.col("e.detail.store_at").alias("store_at"),
        F.col("e.detail.delivered_at").alias("delivered_at"),
    ).dropDuplicates()


# --------------------------------------------------------------------------- figures


def stored_messages(events: DataFrame, config: LatencyConfig) -> DataFrame:
    """``msg_id, topic, stored_at`` of the messages stored inside the window: each message's
    first ``stored`` event in a topic of its own (not a retry or dead-letter copy)."""
    own_copy = ~(
        F.col("topic").startswith(GROUP_TOPIC_PREFIXES[0])
        | F.col("topic").startswith(GROUP_TOPIC_PREFIXES[1])
    )
    stored = (
        events.where((F.col("type") == "stored") & own_copy)
        .withColumn("stored_at", F.coalesce("store_at", "at"))
        .groupBy("msg_id")
        .agg(F.min_by("topic", "stored_at").alias("topic"), F.min("stored_at").alias("stored_at"))
    )
    if config.from_ms is not None:
        stored = stored.where(F.col("stored_at") >= config.from_ms)
    if config.to_ms is not None:
        stored = stored.where(F.col("stored_at") < config.to_ms)
    return stored


def _when(condition: Column, value: Column | str) -> Column:
    column = F.col(value) if isinstance(value, str) else value
    return F.when(condition, column)


def group_deliveries(events: DataFrame) -> DataFrame:
    """One row per (msg_id, group): the first delivery, the ack, attempts, dead letter."""
    kind = F.col("type")
    delivered = kind == "delivered"
    return (
        events.where(F.col("group").isNotNull())
        .groupBy("msg_id", "group")
        .agg(
            F.min(_when(delivered, F.coalesce("delivered_at", "at"))).alias("delivered_at"),
            F.min(_when(kind == "acked", "at")).alias("acked_at"),
            F.max(_when(delivered, "attempt")).alias("last_attempt"),
            F.count(_when(delivered, F.lit(1))).alias("deliveries"),
            F.max(_when(kind == "dead_lettered", F.lit(1))).alias("dead"),
        )
    )


def message_latencies(stored: DataFrame, deliveries: DataFrame) -> DataFrame:
    """One row per (message, group) with its three latencies (null where not reached)."""
    joined = deliveries.join(stored, "msg_id")
    retries = F.greatest(F.coalesce("last_attempt", "deliveries"), F.col("deliveries")) - 1
    return joined.select(
        "topic",
        "group",
        "msg_id",
        (F.col("delivered_at") - F.col("stored_at")).alias("store_to_delivery"),
        (F.col("acked_at") - F.col("delivered_at")).alias("delivery_to_ack"),
        (F.col("acked_at") - F.col("stored_at")).alias("store_to_ack"),
        F.when(F.col("deliveries") > 0, retries).otherwise(0).alias("retries"),
        F.coalesce("dead", F.lit(0)).alias("dead"),
        F.col("delivered_at").isNotNull().alias("delivered"),
        F.col("acked_at").isNotNull().alias("acked"),
    )


def _stage_figures(stage: str) -> list[Column]:
    column = F.col(stage).cast("double")
    return [
        F.count(column).alias(f"{stage}_count"),
        F.percentile(column, list(PERCENTILES)).alias(f"{stage}_percentiles"),
        F.max(column).alias(f"{stage}_max"),
    ]


def latency_rows(per_message: DataFrame) -> list[LatencyRow]:
    """The report's rows, by topic then group."""
    figures = [figure for stage in STAGES for figure in _stage_figures(stage)]
    rows = (
        per_message.groupBy("topic", "group")
        .agg(
            F.count("msg_id").alias("messages"),
            F.count(F.when(F.col("delivered"), 1)).alias("delivered"),
            F.count(F.when(F.col("acked"), 1)).alias("acked"),
            F.sum("retries").alias("retries"),
            F.sum("dead").alias("dead_lettered"),
            *figures,
        )
        .orderBy("topic", "group")
        .collect()
    )
    return [
        LatencyRow(
            topic=row["topic"],
            group=row["group"],
            messages=int(row["messages"]),
            delivered=int(row["delivered"]),
            acked=int(row["acked"]),
            retries=int(row["retries"] or 0),
            dead_lettered=int(row["dead_lettered"] or 0),
            latencies={stage: _stats(row, stage) for stage in STAGES},
        )
        for row in rows
    ]


def _stats(row: Row, stage: str) -> LatencyStats | None:
    count = int(row[f"{stage}_count"])
    if count == 0:
        return None
    p50, p90, p99 = row[f"{stage}_percentiles"]
    return LatencyStats(count, float(p50), float(p90), float(p99), float(row[f"{stage}_max"]))


def stored_per_topic(stored: DataFrame) -> dict[str, int]:
    """Traced messages stored inside the window, per topic."""
    return {row["topic"]: int(row["count"]) for row in stored.groupBy("topic").count().collect()}


def build_report(spark: SparkSession, config: LatencyConfig) -> tuple[LatencyReport, DataFrame]:
    """The report, and the per-message frame it was computed from."""
    events = trace_events(trace_bodies(spark, config)).cache()
    stored = stored_messages(events, config).cache()
    per_message = message_latencies(stored, group_deliveries(events)).cache()
    report = LatencyReport(
        generated_ms=time.time_ns() // 1_000_000,
        from_ms=config.from_ms,
        to_ms=config.to_ms,
        sources=config.sources,
        stored=stored_per_topic(stored),
        rows=latency_rows(per_message),
    )
    return report, per_message


def run_latency_report(spark: SparkSession, config: LatencyConfig) -> LatencyReport:
    """Read, compute and write every output; returns the report."""
    started = time.monotonic()
    report, per_message = build_report(spark, config)
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    per_message.coalesce(1).write.mode("overwrite").parquet(str(out / "latency.parquet"))
    write_json(out / "latency.json", report)
    write_csv(out / "latency.csv", report.rows)
    (out / "report.html").write_text(render_report(report), encoding="utf-8")
    per_message.unpersist()
    sys.stderr.write(
        f"latency: {len(report.rows)} topic/group pairs, outputs in {config.out} "
        f"({time.monotonic() - started:.1f} s)\n"
    )
    return report


# --------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The latency options (shared by ``spoolmq-spark`` and ``spark-submit``)."""
    parser.add_argument(
        "--store", action="append", metavar="DIR", help="a store directory (repeat per broker)"
    )
    parser.add_argument(
        "--broker",
        action="append",
        metavar="URL[,URL]",
        help="one broker group over HTTP: its replicas' URLs, comma-separated (repeat per group)",
    )
    parser.add_argument("--token", help="bearer token for --broker (else $SPOOLMQ_TOKEN)")
    parser.add_argument("--out", required=True, metavar="DIR", help="directory for the outputs")
    parser.add_argument(
        "--from", dest="from_time", metavar="TIME", help="stored at or after (epoch ms or ISO)"
    )
    parser.add_argument(
        "--to", dest="to_time", metavar="TIME", help="stored before (epoch ms or ISO 8601)"
    )
    parser.add_argument("--master", help="Spark master (default: local[*], or spark-submit's)")
    parser.add_argument("--conf", action="append", metavar="KEY=VALUE", help="Spark setting")


def config_from_args(args: argparse.Namespace) -> LatencyConfig:
    """The run configuration of parsed arguments."""
    stores = tuple(str(Path(s).resolve()) for s in args.store or ())
    brokers = tuple(parse_endpoints(b) for b in args.broker or ())
    if not stores and not brokers:
        raise OptionError("give --store DIR or --broker URL (or both)")
    from_ms, to_ms = parse_time_ms(args.from_time), parse_time_ms(args.to_time)
    if from_ms is not None and to_ms is not None and to_ms <= from_ms:
        raise OptionError(f"--to ({to_ms}) must be after --from ({from_ms})")
    return LatencyConfig(args.out, stores, brokers, args.token, from_ms, to_ms)


def run(args: argparse.Namespace, spark: SparkSession | None = None) -> int:
    """Run the job for parsed arguments (in ``spark``, or a session of its own)."""
    config = config_from_args(args)
    session = spark or build_session("spoolmq-latency", args.master, parse_conf(args.conf))
    report = run_latency_report(session, config)
    lines = table_lines(report)
    lines.append(
        f"outputs in {config.out}: report.html, latency.json, latency.csv, latency.parquet"
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit spark_jobs/latency/__main__.py ...`` (or ``python -m spark_jobs.latency``)."""
    return job_main("spark_jobs.latency", DESCRIPTION, add_arguments, run, argv)

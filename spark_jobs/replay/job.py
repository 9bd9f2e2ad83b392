"""``spoolmq-spark replay``: select stored messages and write them to Parquet or re-send them.

    spoolmq-spark replay --store DIR --topic Orders --from-time 2024-05-01T00:00:00Z \\
        --tags "Created||Paid" --to parquet:/tmp/orders
    spoolmq-spark replay --store DIR --topic Orders --queue 3 --from-offset 1200 \\
        --to http://127.0.0.1:8080 --target-topic OrdersReplay --rate 500
    spark-submit spark_jobs/replay/__main__.py --store DIR --topic Orders --dry-run

Selection: topics, queues, a store-time window ``[from, to)``, a queue-offset window
``[from, to)``, tags (``A||B``, exact; read by :func:`storage.tag_filter.subscribed_tags`)
and keys (any of). Prepared and rolled-back transaction records (never delivered) are left out,
and so are the broker's own copies (retry, dead-letter, delay, ``rmq_sys_``, message trace and
transaction topics) unless a topic is named or ``--include-system`` is given. Messages come
in CommitLog order per store.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from spark_jobs.datasource import COMMITLOG_FORMAT
from spark_jobs.errors import SpoolmqError
from spark_jobs.formatting import format_duration, format_time
from spark_jobs.http_client import Connection, RetryPolicy, SpoolmqClient
from spark_jobs.options import (
    DEFAULT_SPLIT_SIZE,
    OptionError,
    job_main,
    parse_endpoints,
    parse_list,
    parse_size,
    parse_time_ms,
)
from spark_jobs.replay.http_sender import (
    HttpReplaySender,
    Progress,
    ReplayMessage,
    SendSummary,
)
from spark_jobs.session import build_session, parse_conf
from storage.delay_levels import SCHEDULE_TOPIC
from storage.record.layout import DISPATCHABLE_TYPES, TRANSACTION_TYPE_MASK
from storage.tag_filter import subscribed_tags
from storage.timer import TIMER_TOPIC
from storage.topic_names import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    TRACE_TOPIC,
    TRANSACTION_TOPICS,
)

DESCRIPTION = "Select stored messages and write them to Parquet or re-send them over HTTP."


@dataclass(frozen=True, slots=True)
class Selection:
    """Which messages a replay takes."""

    stores: tuple[str, ...]
    topics: tuple[str, ...] = ()
    queues: tuple[int, ...] = ()
    from_ms: int | None = None
    to_ms: int | None = None
    from_offset: int | None = None
    to_offset: int | None = None
    tags: frozenset[str] | None = None  # None: any tag or none; empty: no message
    keys: tuple[str, ...] = ()
    split_size: int = DEFAULT_SPLIT_SIZE
    include_system: bool = False  # also the broker's copies, when no topic is named


SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"


@dataclass(frozen=True, slots=True)
class HttpTarget:
    """Where and how a replay re-sends."""

    endpoints: tuple[str, ...]
    """Tried in turn: the replicas of one broker group, or proxies of one cluster."""
    topic: str
    batch_size: int = 100
    max_batch_bytes: int = 1024 * 1024
    rate: float | None = 500.0
    timeout: float = 30.0
    retries: int = 5
    copy_properties: bool = True
    token: str | None = None  # bearer token of a server with an auth file

    def connection(self) -> Connection:
        """The HTTP client's connection: the server, the token, the retries and timeout."""
        retry = RetryPolicy(retries=self.retries, timeout_s=self.timeout)
        return Connection(self.endpoints, self.token, retry)


@dataclass(slots=True)
class ReplaySummary:
    """The end-of-run summary."""

    selected: int = 0
    body_bytes: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)
    first_store_ms: int | None = None
    last_store_ms: int | None = None
    destination: str = "dry run"
    written: int = 0
    send: SendSummary | None = None

    def lines(self) -> list[str]:
        """Human-readable lines."""
        lines = [
            f"selected {self.selected:,} messages ({self.body_bytes:,} body bytes), "
            f"stored {format_time(self.first_store_ms)} .. {format_time(self.last_store_ms)}"
        ]
        lines += [f"  {topic}: {count:,}" for topic, count in sorted(self.by_topic.items())]
        if self.send is not None:
            send = self.send
            rate = send.sent / send.seconds if send.seconds > 0 else 0.0
            lines.append(
                f"sent {send.sent:,} messages to {self.destination} in {send.batches:,} batches, "
                f"{format_duration(send.seconds)} ({rate:,.0f} msg/s), {send.retries} retries"
            )
            if send.first_msg_id:
                lines.append(f"  new ids {send.first_msg_id} .. {send.last_msg_id}")
            if send.dropped_properties:
                lines.append(
                    f"  {send.dropped_properties:,} properties left out: their names or values "
                    "hold RocketMQ's \\x01/\\x02 separators, which the HTTP API refuses"
                )
            if send.empty_bodies:
                lines.append(
                    f"  {send.empty_bodies:,} messages left out: their bodies are empty, which "
                    "a broker refuses"
                )
        elif self.destination != "dry run":
            lines.append(f"wrote {self.written:,} messages to {self.destination}")
        else:
            lines.append("dry run: nothing written or sent")
        return lines


def select_messages(spark: SparkSession, selection: Selection) -> DataFrame:
    """The selected messages as a DataFrame (the ``spoolmq_commitlog`` schema)."""
    reader = (
        spark.read.format(COMMITLOG_FORMAT)
        .option("paths", json.dumps(list(selection.stores)))
        .option("split_size", str(selection.split_size))
    )
    if selection.topics:
        reader = reader.option("topics", ",".join(selection.topics))
    if selection.from_ms is not None:
        reader = reader.option("from_time", str(selection.from_ms))
    if selection.to_ms is not None:
        reader = reader.option("to_time", str(selection.to_ms))
    frame = reader.load()
    transaction = F.col("sys_flag").bitwiseAND(TRANSACTION_TYPE_MASK)
    frame = frame.where(transaction.isin(sorted(DISPATCHABLE_TYPES)))  # no transaction halves
    if selection.queues:
        frame = frame.where(F.col("queue_id").isin(list(selection.queues)))
    if selection.from_offset is not None:
        frame = frame.where(F.col("queue_offset") >= selection.from_offset)
    if selection.to_offset is not None:
        frame = frame.where(F.col("queue_offset") < selection.to_offset)
    if selection.tags is not None:
        frame = frame.where(_tag_condition(selection.tags))
    if selection.keys:
        wanted = F.array(*[F.lit(key) for key in selection.keys])
        frame = frame.where(F.arrays_overlap(F.col("keys"), wanted))
    if not selection.topics and not selection.include_system:
        frame = frame.where(~_system_copy(F.col("topic")))
    return frame


def _system_copy(topic: Column) -> Column:
    """The broker's own copies of messages: retry and dead-letter topics, the delay and timer
    topics holding delayed and timer ones until their time (a delivered one is replayed from
    its own topic), its other ``rmq_sys_`` topics (POP checkpoints), its message trace and its
    transaction topics (half messages, op records, halves checked too often)."""
    return (
        topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
        | topic.startswith(DLQ_GROUP_TOPIC_PREFIX)
        | topic.isin(SCHEDULE_TOPIC, TIMER_TOPIC, TRACE_TOPIC)
        | topic.startswith(SYSTEM_TOPIC_PREFIX)
        | topic.isin(sorted(TRANSACTION_TOPICS))
    )


def _tag_condition(tags: frozenset[str]) -> Column:
    """Messages with one of ``tags``; none at all for an empty set (as RocketMQ)."""
    if not tags:
        return F.lit(False)
    return F.col("tags").isin(sorted(tags))


def describe(frame: DataFrame) -> ReplaySummary:
    """Counts per topic, body bytes and the store-time span of a selection (one scan)."""
    rows = (
        frame.groupBy("topic")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum(F.length("body")).alias("bytes"),
            F.min(F.unix_millis("store_timestamp")).alias("first"),
            F.max(F.unix_millis("store_timestamp")).alias("last"),
        )
        .collect()
    )
    summary = ReplaySummary()
    for row in rows:
        summary.by_topic[row.topic] = int(row.n)
        summary.selected += int(row.n)
        summary.body_bytes += int(row.bytes or 0)
        first, last = int(row.first), int(row.last)
        summary.first_store_ms = min(first, summary.first_store_ms or first)
        summary.last_store_ms = max(last, summary.last_store_ms or last)
    return summary


def write_parquet(frame: DataFrame, path: str, overwrite: bool) -> int:
    """Write the selection as Parquet; returns how many rows the files hold."""
    frame.write.mode("overwrite" if overwrite else "errorifexists").parquet(path)
    return int(frame.sparkSession.read.parquet(path).count())


def send_http(frame: DataFrame, target: HttpTarget, total: int | None) -> SendSummary:
    """Re-send the selection to ``target`` in CommitLog order, printing progress."""
    columns = frame.select("msg_id", "body", "tags", "keys", "properties")
    with SpoolmqClient(target.connection()) as client:
        sender = HttpReplaySender(
            client,
            target.topic,
            batch_size=target.batch_size,
            max_batch_bytes=target.max_batch_bytes,
            rate=target.rate,
            copy_properties=target.copy_properties,
            progress=Progress(total),
        )
        try:
            for row in columns.toLocalIterator(prefetchPartitions=True):
                sender.add(
                    ReplayMessage(
                        msg_id=row.msg_id,
                        body=bytes(row.body),
                        tags=row.tags,
                        keys=tuple(row["keys"]),
                        properties=dict(row.properties),
                    )
                )
        finally:
            summary = sender.close()
    return summary


def run_replay(
    spark: SparkSession,
    selection: Selection,
    destination: str | None,
    target: HttpTarget | None = None,
    dry_run: bool = False,
    overwrite: bool = False,
) -> ReplaySummary:
    """Select, then count (dry run), write Parquet (``parquet:PATH``) or send (``http://…``)."""
    frame = select_messages(spark, selection)
    summary = describe(frame)
    if dry_run or destination is None:
        return summary
    if destination.startswith("parquet:"):
        path = destination.removeprefix("parquet:")
        summary.destination = path
        summary.written = write_parquet(frame, path, overwrite)
        return summary
    if target is None:
        raise OptionError("--target-topic is required to replay over HTTP")
    summary.destination = f"{', '.join(target.endpoints)} topic {target.topic}"
    summary.send = send_http(frame, target, summary.selected)
    return summary


# --------------------------------------------------------------------------- command line


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The replay options (shared by ``spoolmq-spark`` and ``spark-submit``)."""
    add = parser.add_argument
    add("--store", action="append", required=True, metavar="DIR",
        help="a store directory (repeat for several brokers)")  # fmt: skip
    add("--topic", action="append", default=[], help="topic(s) to take (repeat or a,b)")
    add("--queue", action="append", type=int, default=[], help="queue id(s) to take")
    add("--from-time", metavar="TIME", help="stored at or after (epoch ms or ISO 8601, UTC)")
    add("--to-time", metavar="TIME", help="stored before (epoch ms or ISO 8601, UTC)")
    add("--from-offset", type=int, metavar="N", help="queue offset at or above N")
    add("--to-offset", type=int, metavar="N", help="queue offset below N")
    add("--tags", help="tag expression A||B (exact tags; * for any; no tag in it: none)")
    add("--key", action="append", default=[], help="message key(s); any of them matches")
    add("--include-system", action="store_true",
        help="without --topic, also take the broker's copies (%%RETRY%%, %%DLQ%%, "
        "SCHEDULE_TOPIC_XXXX, rmq_sys_*); by default only the messages producers sent")  # fmt: skip
    add("--to", metavar="DEST",
        help="parquet:PATH, or http://host:port (several, comma-separated: the replicas of "
        "one broker group or proxies of one cluster, tried in turn)")  # fmt: skip
    add("--target-topic", help="topic to re-send to (HTTP)")
    add("--batch-size", type=int, default=100, help="messages per HTTP request (default 100)")
    add("--max-batch-bytes", default="1m", help="bytes per HTTP request (default 1m)")
    add("--rate", type=float, default=500.0, help="messages per second, 0 = unlimited")
    add("--timeout", type=float, default=30.0, help="HTTP timeout in seconds")
    add("--retries", type=int, default=5, help="retries of a failed HTTP request")
    # The token comes from the environment, not a flag: flags show up in process listings.
    add("--no-copy-properties", action="store_true",
        help="send only REPLAY_OF, not the original user properties")  # fmt: skip
    add("--overwrite", action="store_true", help="replace an existing Parquet output")
    add("--dry-run", action="store_true", help="count what would be replayed, then stop")
    add("--split-size", default="64m", help="bytes of CommitLog per Spark partition")
    add("--master", help="Spark master (default: local[*], or spark-submit's)")
    add("--conf", action="append", metavar="KEY=VALUE", help="Spark setting")


def _topics(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(t for value in values for t in parse_list(value))


def selection_from_args(args: argparse.Namespace) -> Selection:
    """The selection of parsed arguments."""
    return Selection(
        stores=tuple(str(Path(s).resolve()) for s in args.store),
        topics=_topics(args.topic),
        queues=tuple(args.queue),
        from_ms=parse_time_ms(args.from_time),
        to_ms=parse_time_ms(args.to_time),
        from_offset=args.from_offset,
        to_offset=args.to_offset,
        tags=subscribed_tags(args.tags),
        keys=tuple(args.key),
        split_size=parse_size(args.split_size, DEFAULT_SPLIT_SIZE),
        include_system=args.include_system,
    )


def target_from_args(args: argparse.Namespace) -> HttpTarget | None:
    """The HTTP target of parsed arguments (None unless ``--to http…``)."""
    destination = args.to or ""
    if not destination.startswith(("http://", "https://")):
        return None
    if not args.target_topic:
        raise OptionError("--target-topic is required with --to http://…")
    if args.batch_size < 1:
        raise OptionError("--batch-size must be at least 1")
    return HttpTarget(
        endpoints=parse_endpoints(destination),
        topic=args.target_topic,
        batch_size=args.batch_size,
        max_batch_bytes=parse_size(args.max_batch_bytes, 1024 * 1024),
        rate=args.rate if args.rate > 0 else None,
        timeout=args.timeout,
        retries=args.retries,
        copy_properties=not args.no_copy_properties,
        token=os.environ.get("SPOOLMQ_TOKEN") or None,
    )


def check_destination(args: argparse.Namespace) -> None:
    """Refuse a missing or unknown ``--to`` unless it is a dry run."""
    if args.dry_run:
        return
    destination = args.to or ""
    if not destination.startswith(("parquet:", "http://", "https://")):
        raise OptionError("--to must be parquet:PATH or http://host:port (or use --dry-run)")


def run(args: argparse.Namespace, spark: SparkSession | None = None) -> int:
    """Run the job for parsed arguments (in ``spark``, or a session of its own)."""
    check_destination(args)
    selection = selection_from_args(args)
    target = target_from_args(args)
    session = spark or build_session("spoolmq-replay", args.master, parse_conf(args.conf))
    try:
        summary = run_replay(
            session, selection, args.to, target, dry_run=args.dry_run, overwrite=args.overwrite
        )
    except SpoolmqError as exc:
        sys.stderr.write(f"replay failed: {exc}\n")
        return 1
    sys.stdout.write("\n".join(summary.lines()) + "\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit spark_jobs/replay/__main__.py ...`` (or ``python -m spark_jobs.replay``)."""
    return job_main("spark_jobs.replay", DESCRIPTION, add_arguments, run, argv)

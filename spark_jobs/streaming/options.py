"""Options of the ``spoolmq`` source and sink, parsed from Spark's strings (no pyspark here).

Named after the Kafka source's where one exists (``subscribe``, ``subscribePattern``,
``assign``, ``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``,
``failOnDataLoss``, ``minPartitions``); the connection's own start with ``spoolmq.``.
Spark hands options over case-insensitively, so the lookups here are too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Final

from spark_jobs.http_client import (
    DEFAULT_FETCH_BYTES,
    MAX_FETCH_BYTES,
    Connection,
    RetryPolicy,
)
from spark_jobs.options import (
    OptionError,
    parse_bool,
    parse_endpoints,
    parse_list,
    parse_positive_int,
    parse_sql_filter,
    parse_time_ms,
)

TOKEN_VARIABLE: Final = "SPOOLMQ_TOKEN"
EARLIEST: Final = -2
"""In an offsets JSON: the queue's min offset (Kafka's convention)."""
LATEST: Final = -1
"""In an offsets JSON: the queue's max offset."""
TOPIC_NAME: Final = re.compile(r"^[%|a-zA-Z0-9_-]{1,127}$")
DEFAULT_MAX_OFFSETS_PER_PARTITION: Final = 50_000
DEFAULT_MAX_BYTES_PER_PARTITION: Final = 16 * 1024 * 1024
DEFAULT_HEAD_WAIT_MS: Final = 1000
MAX_HEAD_WAIT_MS: Final = 10_000
"""A long poll at the head well inside a request's timeout."""
DEFAULT_SINK_BATCH: Final = 100
MAX_SINK_BATCH: Final = 1000  # the broker's --max-batch-messages default
DEFAULT_SINK_BATCH_BYTES: Final = 1024 * 1024
WRITE_ID: Final = re.compile(r"^[!-~]{1,64}$")


class Options:
    """Case-insensitive access to Spark's option strings."""

    def __init__(self, raw: Mapping[str, str]) -> None:
        self._values = {str(k).lower(): v for k, v in raw.items() if v is not None}

    def get(self, *names: str) -> str | None:
        """The first of ``names`` that is set (aliases), stripped; None when none is."""
        for name in names:
            value = self._values.get(name.lower())
            if value is not None and str(value).strip() != "":
                return str(value).strip()
        return None


# ------------------------------------------------------------------ the connection


def parse_connection(options: Options) -> Connection:
    """``spoolmq.endpoints`` (comma-separated URLs), ``spoolmq.token`` (else the
    ``SPOOLMQ_TOKEN`` environment variable of the driver), ``spoolmq.retries``,
    ``spoolmq.retryBackoffMs``, ``spoolmq.requestTimeoutMs``."""
    raw = options.get("spoolmq.endpoints", "spoolmq.endpoint", "endpoints", "endpoint")
    endpoints = parse_endpoints(raw)
    if not endpoints:
        raise OptionError(
            "no spoolmq endpoint: set option spoolmq.endpoints, e.g. http://127.0.0.1:8080 "
            "(a broker or a proxy; several, comma-separated, are tried in turn)"
        )
    token = options.get("spoolmq.token", "token") or os.environ.get(TOKEN_VARIABLE) or None
    retries = options.get("spoolmq.retries")
    retry = RetryPolicy(
        retries=10 if retries is None else _non_negative(retries, "spoolmq.retries"),
        backoff_ms=parse_positive_int(
            options.get("spoolmq.retryBackoffMs"), 200, "spoolmq.retryBackoffMs"
        ),
        timeout_s=parse_positive_int(
            options.get("spoolmq.requestTimeoutMs"), 30_000, "spoolmq.requestTimeoutMs"
        )
        / 1000,
    )
    return Connection(endpoints, token, retry)


# ------------------------------------------------------------------ the source


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which queues a source reads: exactly one of the three forms."""

    topics: tuple[str, ...] = ()
    """``subscribe``: every queue of these topics, new queues included."""
    pattern: str | None = None
    """``subscribePattern``: every topic whose whole name matches (new topics included)."""
    assigned: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """``assign``: exactly these queues."""

    def matches(self, topic: str) -> bool:
        return self.pattern is not None and re.fullmatch(self.pattern, topic) is not None


class PositionKind(Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSETS = "offsets"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class Position:
    """Where a read starts or ends: earliest, latest, per queue, or by store time."""

    kind: PositionKind
    offsets: tuple[tuple[str, int, int], ...] = ()
    """(topic, queue, offset); offset may be EARLIEST or LATEST."""
    timestamp_ms: int | None = None


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """Everything a read is configured with."""

    connection: Connection
    subscription: Subscription
    starting: Position
    ending: Position
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    tags: str | None = None
    sql: str | None = None  # the ``filter`` option: SQL92, pushed down to the broker
    consumer_group: str | None = None
    max_offsets_per_partition: int = DEFAULT_MAX_OFFSETS_PER_PARTITION
    min_partitions: int = 1
    fetch_max_bytes: int = DEFAULT_FETCH_BYTES  # one range read's byte budget
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    head_wait_ms: int = DEFAULT_HEAD_WAIT_MS  # a stream's long poll when nothing is new


def parse_source_options(raw: Mapping[str, str], streaming: bool) -> SourceOptions:
    """The options of ``spark.readStream.format("spoolmq")`` (``streaming``) or
    ``spark.read.format("spoolmq")``. Kafka's defaults: a stream starts at latest, a batch
    read starts at earliest and ends at latest."""
    options = Options(raw)
    if streaming:
        for batch_only in ("endingOffsets", "endingTimestamp"):
            if options.get(batch_only):
                raise OptionError(f"{batch_only} is for batch reads (spark.read) only")
    max_per_trigger = options.get("maxOffsetsPerTrigger")
    tags = options.get("tags")
    if tags is not None and len(tags) > 1024:
        raise OptionError("tags is at most 1024 characters (e.g. TagA||TagB)")
    return SourceOptions(
        connection=parse_connection(options),
        subscription=parse_subscription(options),
        starting=parse_position(
            options, "startingOffsets", "startingTimestamp", default=PositionKind.LATEST
        )
        if streaming
        else parse_position(
            options, "startingOffsets", "startingTimestamp", default=PositionKind.EARLIEST
        ),
        ending=parse_position(
            options, "endingOffsets", "endingTimestamp", default=PositionKind.LATEST
        ),
        max_offsets_per_trigger=None
        if max_per_trigger is None
        else parse_positive_int(max_per_trigger, 1, "maxOffsetsPerTrigger"),
        fail_on_data_loss=parse_bool(options.get("failOnDataLoss"), default=True),
        tags=tags,
        sql=parse_sql_filter(options.get("filter")),
        consumer_group=_group(options.get("consumerGroup")),
        max_offsets_per_partition=parse_positive_int(
            options.get("maxOffsetsPerPartition"),
            DEFAULT_MAX_OFFSETS_PER_PARTITION,
            "maxOffsetsPerPartition",
        ),
        min_partitions=parse_positive_int(options.get("minPartitions"), 1, "minPartitions"),
        fetch_max_bytes=_fetch_max_bytes(options.get("fetchMaxBytes")),
        max_bytes_per_partition=parse_positive_int(
            options.get("maxBytesPerPartition"),
            DEFAULT_MAX_BYTES_PER_PARTITION,
            "maxBytesPerPartition",
        ),
        head_wait_ms=_head_wait_ms(options.get("headWaitMs")),
    )


def _head_wait_ms(value: str | None) -> int:
    """``headWaitMs``: how long a stream's trigger waits for an arrival when nothing is new
    (0: not at all), at most MAX_HEAD_WAIT_MS."""
    if value is None:
        return DEFAULT_HEAD_WAIT_MS
    try:
        wait_ms = int(value)
    except ValueError:
        raise OptionError(f"headWaitMs must be an integer, not {value!r}") from None
    if not 0 <= wait_ms <= MAX_HEAD_WAIT_MS:
        raise OptionError(f"headWaitMs is 0 to {MAX_HEAD_WAIT_MS}, not {wait_ms}")
    return wait_ms


def _fetch_max_bytes(value: str | None) -> int:
    """``fetchMaxBytes``: one range read's byte budget, at most what a broker takes."""
    budget = parse_positive_int(value, DEFAULT_FETCH_BYTES, "fetchMaxBytes")
    if budget > MAX_FETCH_BYTES:
        raise OptionError(f"fetchMaxBytes is at most {MAX_FETCH_BYTES} (a broker's cap)")
    return budget


def parse_subscription(options: Options) -> Subscription:
    """Exactly one of ``subscribe`` (comma list), ``subscribePattern`` (a regex matched
    against the whole name) or ``assign`` (JSON ``{"Orders": [0, 1]}``)."""
    given = {name: options.get(name) for name in ("subscribe", "subscribePattern", "assign")}
    named = [name for name, value in given.items() if value is not None]
    if len(named) != 1:
        raise OptionError(
            "give exactly one of subscribe (topics, comma-separated), subscribePattern (a "
            'regular expression) or assign (JSON like {"Orders": [0, 1]})'
            + (f"; got {', '.join(named)}" if named else "")
        )
    if given["subscribe"] is not None:
        return Subscription(topics=tuple(_topic(t) for t in parse_list(given["subscribe"])))
    if given["subscribePattern"] is not None:
        pattern = given["subscribePattern"]
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(
                f"subscribePattern {pattern!r} is not a regular expression: {exc}"
            ) from None
        return Subscription(pattern=pattern)
    return Subscription(assigned=_assignment(str(given["assign"])))


def _assignment(text: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    decoded = _json_object(text, "assign", '{"Orders": [0, 1]}')
    assigned = []
    for topic, queues in sorted(decoded.items()):
        if not isinstance(queues, list) or not queues or not all(_is_queue(q) for q in queues):
            raise OptionError(f"assign: topic {topic!r} needs a non-empty list of queue ids")
        assigned.append((_topic(topic), tuple(sorted(set(queues)))))
    if not assigned:
        raise OptionError("assign names no topic")
    return tuple(assigned)


def parse_position(
    options: Options, offsets_name: str, timestamp_name: str, default: PositionKind
) -> Position:
    """``earliest``, ``latest``, JSON ``{"Orders": {"0": 23, "1": -2}}`` (-2 earliest,
    -1 latest), or a store time in the ``…Timestamp`` option (epoch ms or ISO 8601)."""
    text = options.get(offsets_name)
    stamp = options.get(timestamp_name)
    if text is not None and stamp is not None:
        raise OptionError(f"give {offsets_name} or {timestamp_name}, not both")
    if stamp is not None:
        when = parse_time_ms(stamp)
        if when is None or when < 0:
            raise OptionError(f"{timestamp_name} must be a time, not {stamp!r}")
        return Position(PositionKind.TIMESTAMP, timestamp_ms=when)
    if text is None:
        return Position(default)
    if text.lower() in ("earliest", "latest"):
        return Position(PositionKind(text.lower()))
    decoded = _json_object(text, offsets_name, '{"Orders": {"0": 23, "1": -2}}')
    offsets = []
    for topic, queues in sorted(decoded.items()):
        if not isinstance(queues, dict) or not queues:
            raise OptionError(f"{offsets_name}: topic {topic!r} needs {{queue id: offset}}")
        for queue, offset in queues.items():
            if not str(queue).isdigit() or not _is_offset(offset):
                raise OptionError(
                    f"{offsets_name}: {topic}/{queue} needs a queue id and an offset (>= 0, "
                    f"or -2 earliest, -1 latest); got {offset!r}"
                )
            offsets.append((_topic(topic), int(queue), int(offset)))
    return Position(PositionKind.OFFSETS, offsets=tuple(sorted(offsets)))


# ------------------------------------------------------------------ the sink


class RowOrder(Enum):
    """How a sink task orders its rows before it cuts them into keyed batches."""

    SORTED = "sorted"
    """By content: the same rows give the same batches and keys in any input order (a
    shuffle's output); a task's rows are held in memory, and their order is not kept."""
    INPUT = "input"
    """As they come: order kept and rows streamed; exactly once only when each partition's
    order is the same on every attempt (a spoolmq source with map-like steps)."""


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """Everything a write is configured with."""

    connection: Connection
    topic: str | None = None
    """Overrides a ``topic`` column."""
    batch_size: int = DEFAULT_SINK_BATCH
    batch_bytes: int = DEFAULT_SINK_BATCH_BYTES
    row_order: RowOrder = RowOrder.SORTED
    write_id: str | None = None
    """Batch writes: names the write in its keys, so a re-run with the same id inside the
    window stores nothing twice; a fresh one per write by default."""


def parse_sink_options(raw: Mapping[str, str]) -> SinkOptions:
    """The options of ``writeStream.format("spoolmq")`` and ``write.format("spoolmq")``:
    the connection, ``topic``, ``batchSize`` (messages per request, at most 1000),
    ``rowOrder`` (sorted or input), ``writeId`` (batch writes)."""
    options = Options(raw)
    topic = options.get("topic")
    order = (options.get("rowOrder") or RowOrder.SORTED.value).lower()
    if order not in {o.value for o in RowOrder}:
        raise OptionError(f"rowOrder is sorted or input, not {order!r}")
    batch_size = parse_positive_int(options.get("batchSize"), DEFAULT_SINK_BATCH, "batchSize")
    if batch_size > MAX_SINK_BATCH:
        raise OptionError(f"batchSize is at most {MAX_SINK_BATCH} (the broker's batch limit)")
    write_id = options.get("writeId")
    if write_id is not None and WRITE_ID.fullmatch(write_id) is None:
        raise OptionError("writeId is 1 to 64 printable ASCII characters without spaces")
    return SinkOptions(
        connection=parse_connection(options),
        topic=None if topic is None else _topic(topic),
        batch_size=batch_size,
        row_order=RowOrder(order),
        write_id=write_id,
    )


# ------------------------------------------------------------------ small checks


def _topic(name: str) -> str:
    if TOPIC_NAME.fullmatch(name) is None:
        raise OptionError(
            f"{name!r} is not a topic name (1 to 127 of letters, digits, %, |, _ and -)"
        )
    return name


def _group(name: str | None) -> str | None:
    if name is not None and (TOPIC_NAME.fullmatch(name) is None or len(name) > 120):
        raise OptionError(f"consumerGroup {name!r} is not a group name")
    return name


def _json_object(text: str, what: str, example: str) -> dict[str, object]:
    try:
        decoded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{what} is not JSON ({exc}); e.g. {example}") from None
    if not isinstance(decoded, dict):
        raise OptionError(f"{what} is a JSON object, e.g. {example}")
    return decoded


def _is_queue(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1024 * 1024


def _is_offset(value: object) -> bool:
    return (
        isinstance(value, int)
        and not isinstance(value, bool)
        and (value >= 0 or value in (EARLIEST, LATEST))
    )


def _non_negative(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"{what} must be an integer, not {text!r}") from None
    if value < 0:
        raise OptionError(f"{what} must be 0 or more, not {value}")
    return value

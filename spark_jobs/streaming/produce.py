"""The sink's work in one task: rows to messages, messages to keyed batches, batches sent.

Exactly once rests on one rule: every attempt at the same task sends the same batches under
the same ``Idempotency-Key``, so the broker stores each batch once and answers the repeats
with the first receipts. A batch's key names the write and the task (the streaming query's
id and micro-batch id, or a batch write's id, and the partition) and the batch's index in
the task; the batches themselves must come out the same on every attempt:

- ``rowOrder=sorted`` (default) sorts a task's messages by (topic, placement, content
  digest) before cutting them, so any order of the same rows -- a shuffle's output is in
  no fixed order -- gives the same batches. The task's messages are held in memory.
- ``rowOrder=input`` cuts them as they come, keeping their order; right when each
  partition's rows come in the same order on every attempt (a ``spoolmq`` source and
  row-by-row steps). If they do not, the broker refuses the changed batch (422) rather
  than store it twice.

A batch goes to one queue: the rows' ``queue_id``, or their ``sharding_key``, or -- rows
that name neither -- the batch's own key as its sharding key, so a repeat reaches the same
queue through any broker or proxy.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import pyarrow as pa  # type: ignore[import-untyped]

from spark_jobs.http_client import SpoolmqClient
from spark_jobs.options import OptionError
from spark_jobs.properties import sendable_properties
from spark_jobs.streaming.options import RowOrder, SinkOptions

SINK_COLUMNS: Final = (
    "value", "key", "keys", "tags", "properties", "topic", "queue_id", "sharding_key",
)  # fmt: skip
"""Columns the sink reads; any other column is ignored (as the Kafka sink does)."""
_MESSAGE_OVERHEAD: Final = 64  # JSON field names and punctuation per message

Placement = tuple[int, str]
"""(0, "") anywhere, (1, "<queue id>") a queue, (2, key) a sharding key: sortable."""
_ANYWHERE: Final[Placement] = (0, "")


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One row as a message of a send request, with where it goes."""

    topic: str
    placement: Placement
    message: dict[str, Any]
    size: int
    dropped_properties: int = 0

    def order_key(self) -> tuple[str, Placement, bytes]:
        encoded = orjson.dumps(self.message, option=orjson.OPT_SORT_KEYS)
        return self.topic, self.placement, hashlib.sha256(encoded).digest()


@dataclass(slots=True)
class TaskTally:
    """What one task sent."""

    messages: int = 0
    requests: int = 0
    replayed_messages: int = 0
    dropped_properties: int = 0
    topics: set[str] = field(default_factory=set)


def check_columns(names: Iterable[str], options: SinkOptions) -> None:
    """Fail early (on the driver) when the rows cannot be sent."""
    present = set(names)
    if "value" not in present:
        raise OptionError(
            "the spoolmq sink needs a value column (binary or string) holding each "
            f"message's body; the columns are {', '.join(sorted(present)) or 'none'}"
        )
    if options.topic is None and "topic" not in present:
        raise OptionError("no topic: set option topic, or give the rows a topic column")


def outgoing_rows(batch: pa.RecordBatch, default_topic: str | None) -> Iterator[Outgoing]:
    """Each row of an Arrow batch as an Outgoing message (``default_topic`` wins)."""
    column = {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    text_value = pa.types.is_string(batch.schema.field("value").type) or pa.types.is_large_string(
        batch.schema.field("value").type
    )
    for row in range(batch.num_rows):
        yield _outgoing(
            {n: column[n][row] for n in SINK_COLUMNS if n in column}, default_topic, text_value
        )


def _outgoing(row: dict[str, Any], default_topic: str | None, text_value: bool) -> Outgoing:
    value = row["value"]
    if value is None:
        raise ValueError("a row has a null value: every message needs a body")
    if text_value:
        message: dict[str, Any] = {"body": value, "body_encoding": "utf-8"}
    else:
        message = {"body": base64.b64encode(value).decode("ascii"), "body_encoding": "base64"}
    keys = [row["key"]] if row.get("key") is not None else []
    keys += [k for k in row.get("keys") or () if k is not None and k not in keys]
    if keys:
        message["keys"] = keys
    if row.get("tags") is not None:
        message["tags"] = row["tags"]
    kept, dropped = sendable_properties(dict(row.get("properties") or ()))
    if kept:
        message["properties"] = dict(sorted(kept.items()))
    topic = default_topic or row.get("topic")
    if not topic:
        raise ValueError("a row has no topic (null topic column, and no topic option)")
    size = len(message["body"]) + _MESSAGE_OVERHEAD + sum(len(k) for k in keys)
    size += sum(len(n) + len(v) for n, v in kept.items()) + len(message.get("tags", ""))
    return Outgoing(topic, _placement(row), message, size, dropped)


def _placement(row: dict[str, Any]) -> Placement:
    if row.get("queue_id") is not None:
        return (1, str(int(row["queue_id"])))
    if row.get("sharding_key") is not None:
        return (2, str(row["sharding_key"]))
    return _ANYWHERE


# ------------------------------------------------------------------ batches


def cut(
    rows: Iterable[Outgoing], order: RowOrder, batch_size: int, batch_bytes: int
) -> Iterator[list[Outgoing]]:
    """The task's send requests: runs of rows for one (topic, placement), each at most
    ``batch_size`` messages and about ``batch_bytes``, in an order fixed by ``order``."""
    if order is RowOrder.SORTED:
        ordered = sorted(rows, key=Outgoing.order_key)
        yield from _runs(ordered, batch_size, batch_bytes)
        return
    open_batches: dict[tuple[str, Placement], list[Outgoing]] = {}
    sizes: dict[tuple[str, Placement], int] = {}
    for row in rows:
        target = (row.topic, row.placement)
        pending = open_batches.get(target)
        if pending and sizes[target] + row.size > batch_bytes:
            yield open_batches.pop(target)
            pending = None
        if pending is None:
            pending = open_batches[target] = []
            sizes[target] = 0
        pending.append(row)
        sizes[target] += row.size
        if len(pending) >= batch_size:
            yield open_batches.pop(target)
    for target in sorted(open_batches):
        yield open_batches[target]


def _runs(ordered: list[Outgoing], batch_size: int, batch_bytes: int) -> Iterator[list[Outgoing]]:
    run: list[Outgoing] = []
    size = 0
    for row in ordered:
        if run and (
            (row.topic, row.placement) != (run[0].topic, run[0].placement)
            or len(run) >= batch_size
            or size + row.size > batch_bytes
        ):
            yield run
            run, size = [], 0
        run.append(row)
        size += row.size
    if run:
        yield run


def request_body(batch: list[Outgoing], key: str) -> dict[str, Any]:
    """The JSON of one send: the messages and the batch's queue or sharding key."""
    body: dict[str, Any] = {"messages": [row.message for row in batch]}
    kind, value = batch[0].placement
    if kind == 1:
        body["queue_id"] = int(value)
    else:
        body["sharding_key"] = value if kind == 2 else key
    return body


def send_task(
    client: SpoolmqClient,
    rows: Iterable[Outgoing],
    options: SinkOptions,
    key_prefix: str,
) -> TaskTally:
    """Cut and send a task's rows; batch ``i`` goes under the key ``<key_prefix>:<i>``."""
    tally = TaskTally()
    batches = cut(rows, options.row_order, options.batch_size, options.batch_bytes)
    for index, batch in enumerate(batches):
        key = f"{key_prefix}:{index}"
        sent = client.send(batch[0].topic, request_body(batch, key), key)
        tally.requests += 1
        tally.messages += len(batch)
        tally.dropped_properties += sum(row.dropped_properties for row in batch)
        tally.topics.add(batch[0].topic)
        if sent.replayed:
            tally.replayed_messages += len(batch)
    return tally


def key_prefix(*parts: object) -> str:
    """``spark:<part>:<part>…``: printable ASCII without spaces, as keys must be."""
    prefix = ":".join(["spark", *(str(p) for p in parts)])
    if len(prefix) > 100 or not all("!" <= c <= "~" for c in prefix):
        raise ValueError(f"cannot make idempotency keys from {prefix!r}")
    return prefix

"""Stores built through MessageStore, and the rows the Spark jobs must read back from them."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from storage import Message, MessageStore, PutResult, StoreConfig
from storage.record.layout import STOREHOSTADDRESS_V6_FLAG

FILE_SIZE = 64 * 1024
CONFIG = StoreConfig(commit_log_file_size=FILE_SIZE, consume_queue_units_per_file=50)
TOPICS = ("Orders", "Payments", "Audit")


@dataclass(frozen=True)
class Written:
    """A message as sent and where the store put it."""

    store_dir: str
    message: Message
    result: PutResult


def varied_message(rng: random.Random, index: int, topics: Sequence[str] = TOPICS) -> Message:
    """Binary bodies of 0..3000 bytes (every byte value), tags, keys, extra properties."""
    body = rng.randbytes(rng.choice([0, 1, 2, 64, 200, 700, 3000]))
    properties: dict[str, str] = {
        "UNIQ_KEY": f"{index:032X}",
        "TAGS": rng.choice(["Created", "Paid", "Shipped"]),
    }
    if index % 3 == 0:
        properties["KEYS"] = f"order-{index} customer-{index % 11}"
    if index % 5 == 0:
        properties["trace"] = f"ü-{index}\x01with-separator"
        properties["empty"] = ""  # dropped by the store's property decoding
    if index % 13 == 0:
        properties = {}
    return Message(
        topic=topics[index % len(topics)],
        body=body,
        queue_id=index % 4,
        properties=properties,
        born_timestamp=1_700_000_000_000 + index,
        reconsume_times=index % 3,
    )


def write_store(
    store_dir: Path,
    messages: Iterable[Message],
    config: StoreConfig = CONFIG,
    before_put: Callable[[int], None] | None = None,
) -> list[Written]:
    """Put every message through MessageStore, close it, return what was written."""
    written = []
    with MessageStore.open(store_dir, config) as store:
        for index, message in enumerate(messages):
            if before_put is not None:
                before_put(index)
            written.append(Written(str(store_dir.resolve()), message, store.put([message])[0]))
    return written


def varied_store(store_dir: Path, count: int = 600, seed: int = 1) -> list[Written]:
    """A store of ``count`` varied messages across several CommitLog files."""
    rng = random.Random(seed)
    return write_store(store_dir, (varied_message(rng, i) for i in range(count)))


def expected_row(written: Written, store_v6: bool = False) -> dict[str, Any]:
    """The DataFrame row of a written message, from what was sent and the PutResult."""
    message, result = written.message, written.result
    properties = {k: v for k, v in message.properties.items() if k and v}
    keys = properties.get("KEYS", "")
    return {
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": result.queue_offset,
        "commit_log_offset": result.physical_offset,
        "size": result.size,
        "msg_id": result.msg_id,
        "uniq_key": properties.get("UNIQ_KEY"),
        "tags": properties.get("TAGS"),
        "keys": [k for k in keys.split(" ") if k],
        "properties": properties,
        "body": message.body,
        "born_timestamp": message.born_timestamp,
        "store_timestamp": result.store_timestamp,
        "reconsume_times": message.reconsume_times,
        "sys_flag": STOREHOSTADDRESS_V6_FLAG if store_v6 else 0,
        "store_dir": written.store_dir,
    }


def _millis(value: Any) -> Any:
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    return value


def normalize(row: dict[str, Any]) -> dict[str, Any]:
    """A row read back (Arrow pylist or Spark Row dict) in the shape of :func:`expected_row`."""
    properties = row["properties"]
    if isinstance(properties, list):
        properties = dict(properties)
    return {
        **row,
        "keys": list(row["keys"]),
        "properties": dict(properties),
        "body": bytes(row["body"]),
        "born_timestamp": _millis(row["born_timestamp"]),
        "store_timestamp": _millis(row["store_timestamp"]),
    }


def sorted_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows in (store, CommitLog offset) order, normalized."""
    return sorted(
        (normalize(r) for r in rows), key=lambda r: (r["store_dir"], r["commit_log_offset"])
    )


def tear_tail(written: list[Written]) -> list[Written]:
    """Damage the end of the last CommitLog file like a crash would; return what survives.

    The last record loses its second half (zeros: a torn write), and garbage follows it.
    """
    last = written[-1].result
    store_dir = Path(written[-1].store_dir)
    path = store_dir / "commitlog" / f"{last.physical_offset // FILE_SIZE * FILE_SIZE:020d}"
    position = last.physical_offset % FILE_SIZE
    with open(path, "r+b") as handle:
        handle.seek(position + last.size // 2)
        handle.write(bytes(last.size - last.size // 2))
        handle.write(b"\xde\xad\xbe\xef" * 64)
    return written[:-1]

"""Hand-built RocketMQ 5.x format v2 records (magic 0xDAA320AB, a two-byte topic length).

spoolmq writes v1 only. A v2 record here is a v1 record from :func:`storage.record.
encode.encode_message` with the magic code changed and the topic length widened to a short (and, to
show what v2 is for, optionally a topic longer than v1's 127 bytes). The expected DataFrame
row is the v1 twin's row with the v2 record's topic and size.
"""

from __future__ import annotations

from typing import Any

from spark_jobs.records import record_row, rows_to_batch
from storage.record.decode import decode_record
from storage.record.encode import encode_message
from storage.record.message import Message
from tests.storage.record.golden import to_v2

STORE_TIME_0 = 1_710_000_000_000
LONG_TOPIC = "Orders." + "x" * 200  # longer than a v1 record can hold


def mixed_records(
    messages: list[tuple[Message, bool, str | None]],
    file_start: int = 0,
    store_dir: str = "/store",
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
    store_time_0: int = STORE_TIME_0,
) -> tuple[bytes, list[dict[str, Any]]]:
    """Records back to back from CommitLog offset ``file_start``: (message, as v2, v2 topic)
    each, stored a second apart from ``store_time_0``; returns the bytes and the expected rows
    (as Arrow gives them back)."""
    buffer = bytearray()
    rows = []
    for index, (message, v2, topic) in enumerate(messages):
        offset = file_start + len(buffer)
        v1 = encode_message(
            message,
            queue_offset=index,
            physical_offset=offset,
            store_timestamp=store_time_0 + index * 1000,
            store_host=store_host,
        )
        record = to_v2(v1, topic) if v2 else v1
        row = record_row(decode_record(v1), offset, store_dir)
        if v2:
            row.update(topic=topic or message.topic, size=len(record))
        rows.append(row)
        buffer += record
    return bytes(buffer), list(rows_to_batch(rows).to_pylist())

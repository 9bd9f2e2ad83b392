"""A range read's records as the source's rows, without Spark: the store-directory source's
decoder gives every column a pull shows, for every kind of record; a range's end and the
offsets a read skipped are kept exactly; a range the broker has not reached yet is waited
for with its long poll."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.http_client import Connection, SpoolmqClient
from spark_jobs.streaming.fetch import ARROW_SCHEMA, fetch_range, gaps, to_batch
from spark_jobs.streaming.offsets import QueueRange
from storage import MessageStore
from storage.record.fields import NamedView, message_view
from tests.conftest import LiveServer, wait_until
from tests.storage.conftest import TINY_CONFIG, message
from tests.storage.record.golden import every_kind_of_message_record


def pull_row(view: NamedView, queue_range: QueueRange) -> dict[str, Any]:
    """The row the source made of a pulled message (its JSON carried these fields)."""
    return {
        "key": view.keys[0] if view.keys else None,
        "keys": view.keys,
        "value": view.body,
        "topic": queue_range.topic,
        "queue_id": queue_range.queue_id,
        "queue_offset": view.queue_offset,
        "msg_id": view.msg_id,
        "tags": view.tags,
        "properties": sorted(view.properties.items()),
        "born_ms": view.born_timestamp,
        "store_ms": view.store_timestamp,
        "broker_group": queue_range.broker_group,
    }


def source_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of ``to_batch`` in :func:`pull_row`'s form."""
    row = dict(row)
    row["properties"] = sorted(row["properties"])
    row["born_ms"] = round(row.pop("born_timestamp").timestamp() * 1000)
    row["store_ms"] = round(row.pop("store_timestamp").timestamp() * 1000)
    return row


@pytest.mark.parametrize("record", every_kind_of_message_record())
def test_every_kind_of_record_becomes_the_row_a_pull_gave(record: bytes) -> None:
    view = NamedView._make(message_view(record, 0))
    queue_range = QueueRange("Orders", 7, view.queue_offset, view.queue_offset + 1, "g2")
    batch = to_batch(record, queue_range)
    assert batch.schema == ARROW_SCHEMA
    [row] = batch.to_pylist()
    assert source_row(row) == pull_row(view, queue_range)


def test_records_of_a_store_become_its_pulled_rows_and_stop_at_the_range_end(
    tmp_path: Path,
) -> None:
    with MessageStore.open(tmp_path / "store", TINY_CONFIG) as store:
        for i in range(30):
            tags = "odd" if i % 2 else None
            store.put([message(body=f"b{i}".encode(), tags=tags, keys=f"k{i} x{i}", n=str(i))])
        read = store.read_records("TopicA", 0, 2, 1 << 20)
        views: list[Any] = []
        offset = 2
        while offset < 22:  # pulls stop at the end of a ConsumeQueue file
            pulled = store.get_message("g", "TopicA", 0, offset, 22 - offset, views=True)
            views += pulled.views
            offset = pulled.next_begin_offset
    queue_range = QueueRange("TopicA", 0, 2, 22)
    rows = [source_row(r) for r in to_batch(read.records, queue_range).to_pylist()]
    assert rows == [pull_row(NamedView._make(v), queue_range) for v in views]
    assert [r["queue_offset"] for r in rows] == list(range(2, 22))


@pytest.mark.parametrize(
    ("offsets", "expected"),
    [
        pytest.param([3, 4, 5, 6], [], id="none"),
        pytest.param([], [(3, 7)], id="all"),
        pytest.param([3, 6], [(4, 6)], id="middle"),
        pytest.param([5], [(3, 5), (6, 7)], id="both-ends"),
    ],
)
def test_gaps_are_the_offsets_a_read_skipped(
    offsets: list[int], expected: list[tuple[int, int]]
) -> None:
    assert gaps(3, 7, offsets) == expected


def test_a_range_past_the_head_is_read_once_its_records_arrive(
    live_server: LiveServer, topic: str
) -> None:
    http = live_server.client()
    assert http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 1}).status_code == 201

    def send(body: str) -> None:
        answer = http.post(f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": 0})
        assert answer.status_code == 201, answer.text

    send("m0")
    slept: list[float] = []
    parked = live_server.broker.waiters.parked
    rows: list[Any] = []
    with SpoolmqClient(Connection((live_server.url,))) as client:
        # planned up to offset 3 while the broker holds 1 (a replica behind its master)
        reader = threading.Thread(
            target=lambda: rows.extend(
                batch
                for batch in fetch_range(
                    client, QueueRange(topic, 0, 0, 3), None, True, slept.append
                )
            )
        )
        reader.start()
        wait_until(lambda: live_server.broker.waiters.parked > parked)
        send("m1")
        wait_until(lambda: live_server.broker.waiters.parked > parked)
        send("m2")
        reader.join(60)
    read = [r for batch in rows for r in batch.to_pylist()]
    assert [(r["queue_offset"], r["value"]) for r in read] == [(0, b"m0"), (1, b"m1"), (2, b"m2")]
    assert slept == [], "the broker's long poll waited, not the reader"

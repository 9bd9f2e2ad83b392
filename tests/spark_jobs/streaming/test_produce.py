"""The sink's rows, batches and keys, without Spark: the same rows must make the same keyed
batches on every attempt."""

from __future__ import annotations

import base64
import random
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

from spark_jobs.options import OptionError
from spark_jobs.streaming.options import RowOrder, parse_sink_options
from spark_jobs.streaming.produce import (
    Outgoing,
    check_columns,
    cut,
    key_prefix,
    outgoing_rows,
    request_body,
)

PROPERTIES = pa.map_(pa.string(), pa.string())


def rows(**columns: Any) -> list[Outgoing]:
    batch = (
        pa.RecordBatch.from_pydict(columns)
        if "properties" not in columns
        else (
            pa.RecordBatch.from_arrays(
                [
                    pa.array(v, PROPERTIES) if name == "properties" else pa.array(v)
                    for name, v in columns.items()
                ],
                names=list(columns),
            )
        )
    )
    return list(outgoing_rows(batch, None))


def test_a_row_becomes_a_message_of_a_send() -> None:
    binary, text = rows(
        value=[b"\x00\x01", b"x"],
        key=["order-1", None],
        keys=[["order-1", "cust-9"], None],
        tags=["Paid", None],
        properties=[[("region", "eu"), ("UNIQ_KEY", "ABC"), ("bad", "a\x01b")], None],
        topic=["Orders", "Other"],
        queue_id=[3, None],
        sharding_key=[None, "cust-9"],
    )
    assert binary.topic == "Orders" and binary.placement == (1, "3")
    assert binary.message == {
        "body": base64.b64encode(b"\x00\x01").decode(),
        "body_encoding": "base64",
        "keys": ["order-1", "cust-9"],
        "tags": "Paid",
        "properties": {"region": "eu"},  # UNIQ_KEY is the broker's; \x01 cannot travel
    }
    assert binary.dropped_properties == 1
    assert (text.topic, text.placement) == ("Other", (2, "cust-9"))
    assert text.message == {"body": "eA==", "body_encoding": "base64"}
    (plain,) = list(outgoing_rows(pa.RecordBatch.from_pydict({"value": ["héllo"]}), "Paid"))
    assert (plain.topic, plain.placement) == ("Paid", (0, ""))
    assert plain.message == {"body": "héllo", "body_encoding": "utf-8"}


def test_a_row_without_a_value_or_a_topic_is_refused() -> None:
    with pytest.raises(ValueError, match="null value"):
        rows(value=[None], topic=["T"])
    with pytest.raises(ValueError, match="no topic"):
        rows(value=[b"x"], topic=[None])
    options = parse_sink_options({"endpoint": "http://x"})
    with pytest.raises(OptionError, match="needs a value column"):
        check_columns(["body"], options)
    with pytest.raises(OptionError, match="no topic"):
        check_columns(["value"], options)
    check_columns(["value", "topic"], options)


def many(n: int) -> list[Outgoing]:
    placements = [(0, ""), (1, "2"), (2, "cust-1")]
    return [
        Outgoing("T" if i % 5 else "U", placements[i % 3], {"body": f"m{i % 40}"}, 20 + i % 7)
        for i in range(n)
    ]


def batches_of(order: RowOrder, items: list[Outgoing]) -> list[list[dict[str, Any]]]:
    return [[r.message for r in b] for b in cut(items, order, batch_size=8, batch_bytes=150)]


def test_sorted_order_cuts_the_same_batches_from_any_order_of_the_same_rows() -> None:
    items = many(200)  # with repeats: 40 bodies over 200 rows
    first = list(cut(items, RowOrder.SORTED, 8, 150))
    shuffled = items[:]
    random.Random(7).shuffle(shuffled)
    assert batches_of(RowOrder.SORTED, shuffled) == [[r.message for r in b] for b in first]
    for batch in first:
        assert len({(r.topic, r.placement) for r in batch}) == 1  # one queue per send
        assert len(batch) <= 8 and (len(batch) == 1 or sum(r.size for r in batch) <= 150)
    assert sorted(r.message["body"] for b in first for r in b) == sorted(
        r.message["body"] for r in items
    )


def test_input_order_keeps_each_targets_rows_in_order() -> None:
    items = many(60)
    batches = list(cut(items, RowOrder.INPUT, 8, 150))
    for target in {(r.topic, r.placement) for r in items}:
        sent = [r for b in batches for r in b if (r.topic, r.placement) == target]
        assert sent == [r for r in items if (r.topic, r.placement) == target]
    assert batches == list(cut(items, RowOrder.INPUT, 8, 150))


def test_a_send_names_its_queue_its_sharding_key_or_its_own_key() -> None:
    to_queue = Outgoing("T", (1, "4"), {"body": "a"}, 10)
    by_key = Outgoing("T", (2, "cust-1"), {"body": "b"}, 10)
    anywhere = Outgoing("T", (0, ""), {"body": "c"}, 10)
    assert request_body([to_queue], "k") == {"messages": [{"body": "a"}], "queue_id": 4}
    assert request_body([by_key], "k")["sharding_key"] == "cust-1"
    assert request_body([anywhere], "spark:q:1:0:3")["sharding_key"] == "spark:q:1:0:3"


def test_keys_are_printable_ascii_within_the_brokers_limit() -> None:
    query = "0d5c1c51-2f4e-4a63-9b8a-5cc7d5a0b1f2"
    assert key_prefix(query, 12, 3) == f"spark:{query}:12:3"
    with pytest.raises(ValueError):
        key_prefix("with space", 1, 0)
    with pytest.raises(ValueError):
        key_prefix("x" * 120, 1, 0)

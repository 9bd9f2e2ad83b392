"""The record parsers without Spark: the vectorised batches equal the record decoder's, for
v1 and v2 records."""

from __future__ import annotations

import dataclasses
import random
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pytest

import spark_jobs.properties_column as properties_column
from spark_jobs.arrays import as_bytes
from spark_jobs.properties_column import PROPERTIES_TYPE
from spark_jobs.records import (
    ARROW_SCHEMA,
    RecordFilter,
    build_batch,
    properties_without,
    range_records,
    record_row,
    rows_to_batch,
    walk_chain,
)
from spark_jobs.scan import ByteRange, read_range
from storage.record.decode import RecordKind, decode_record
from storage.record.encode import blank_record, encode_message
from storage.record.layout import BORNHOST_V6_FLAG
from storage.record.message import Message
from storage.store_reader import iter_store_records, scan_records, scan_stop
from tests.spark_jobs.stores import expected_row, sorted_rows, varied_message, varied_store
from tests.spark_jobs.v2_records import LONG_TOPIC, STORE_TIME_0, mixed_records
from tests.storage.record.golden import KEYED_PROPERTIES, every_kind_of_message_record


@pytest.fixture
def slow_path_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch sizes whose properties fall back to decoding record by record."""
    calls: list[int] = []
    original = properties_column._per_record_properties

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(args[1]) - 1)
        return original(*args, **kwargs)

    monkeypatch.setattr(properties_column, "_per_record_properties", spy)
    return calls


def encode_all(
    messages: list[Message], store_host: tuple[str, int] = ("127.0.0.1", 10911)
) -> bytes:
    """Records back to back, as in a CommitLog file starting at offset 0."""
    buffer = bytearray()
    for index, message in enumerate(messages):
        buffer += encode_message(
            message,
            queue_offset=index,
            physical_offset=len(buffer),
            store_timestamp=1_710_000_000_000 + index * 1000,
            store_host=store_host,
        )
    return bytes(buffer)


def reference_rows(buffer: bytes, store_dir: str = "/store") -> list[dict[str, Any]]:
    """Rows of the per-record parser (``decode_record``), as Arrow gives them back."""
    rows = [
        record_row(decode_record(buffer, position), position, store_dir)
        for position, _ in scan_records(buffer)
    ]
    return list(rows_to_batch(rows).to_pylist())


def millis(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def vector_rows(buffer: bytes, store_dir: str = "/store", **filters: Any) -> list[dict[str, Any]]:
    chain = walk_chain(buffer, 0)
    batch = build_batch(as_bytes(buffer), chain.positions, 0, store_dir, RecordFilter(**filters))
    assert batch.schema.equals(ARROW_SCHEMA)
    return list(batch.to_pylist())


def test_vectorised_batches_equal_the_decoder_for_a_whole_store(
    tmp_path: Path, slow_path_calls: list[int]
) -> None:
    written = varied_store(tmp_path / "store", count=500)
    store_dir = written[0].store_dir
    whole_files = [
        ByteRange(store_dir, str(path), int(path.name), 0, None)
        for path in sorted((tmp_path / "store" / "commitlog").iterdir())
    ]
    batches = [b for r in whole_files for b in read_range(r, batch_size=64)]
    got = sorted_rows(row for batch in batches for row in batch.to_pylist())
    reference = sorted_rows(
        rows_to_batch(
            [
                record_row(r.message, r.commit_log_offset, store_dir)
                for r in iter_store_records(tmp_path / "store")
            ]
        ).to_pylist()
    )
    assert got == reference == [expected_row(w) for w in written]
    assert slow_path_calls == []


def test_property_edge_cases(slow_path_calls: list[int]) -> None:
    messages = [
        Message("T", b"", properties={}),
        Message("T", b"\x01\x02body", properties={"a": "x\x01y", "b": "", "c": "ü€"}),
        Message("T", b"x", properties={"KEYS": "  k1   k2 ", "TAGS": "t", "UNIQ_KEY": "U"}),
        Message("T", b"x", properties={"KEYS": "   "}),
        Message("T", b"x", properties={f"p{i}": "v" * i for i in range(1, 40)}),
    ]
    buffer = encode_all(messages)
    assert vector_rows(buffer) == reference_rows(buffer)
    rows = vector_rows(buffer)
    assert rows[1]["properties"] == [("a", "x\x01y"), ("c", "ü€")]
    assert rows[2]["keys"] == ["k1", "k2"]
    assert (rows[2]["tags"], rows[2]["uniq_key"]) == ("t", "U")
    assert rows[3]["keys"] == []
    assert slow_path_calls == []


def test_a_repeated_property_name_takes_the_last_value(slow_path_calls: list[int]) -> None:
    record = bytearray(encode_all([Message("T", b"x", properties={"A": "1", "B": "2"})]))
    at = record.index(b"B\x012")
    record[at] = ord("A")  # same length: TOTALSIZE and CRC stay valid
    buffer = bytes(record)
    rows = vector_rows(buffer)
    assert rows == reference_rows(buffer)
    assert rows[0]["properties"] == [("A", "2")]
    assert slow_path_calls == [1]


def test_properties_that_are_not_utf8_are_replaced(slow_path_calls: list[int]) -> None:
    record = bytearray(encode_all([Message("T", b"x", properties={"A": "zz"})]))
    at = record.index(b"A\x01zz")
    record[at + 2 : at + 4] = b"\xff\xfe"
    buffer = bytes(record)
    assert vector_rows(buffer) == reference_rows(buffer)
    assert slow_path_calls == [1]


def test_ipv6_hosts_are_read_vectorised(slow_path_calls: list[int]) -> None:
    messages = [
        Message("T", b"v6", born_host=("::1", 5), properties={"TAGS": "a"}),
        Message("T", b"v4", properties={"TAGS": "b"}),
    ]
    buffer = encode_all(messages, store_host=("2001:db8::1", 10911))
    rows = vector_rows(buffer)
    assert rows == reference_rows(buffer)
    assert len(rows[0]["msg_id"]) == 56
    assert rows[0]["sys_flag"] & BORNHOST_V6_FLAG
    assert slow_path_calls == []


def test_store_hosts_of_both_widths_in_one_batch() -> None:
    v4 = encode_all([Message("T", b"a"), Message("T", b"b")])
    v6 = encode_message(
        Message("T", b"c"), 2, len(v4), 1_710_000_002_000, store_host=("2001:db8::1", 7)
    )
    buffer = v4 + v6
    rows = vector_rows(buffer)
    assert rows == reference_rows(buffer)
    assert [len(row["msg_id"]) for row in rows] == [32, 32, 56]


def test_a_batch_without_any_property() -> None:
    buffer = encode_all([Message("T", b"a"), Message("T", b"b", properties={"x": ""})])
    rows = vector_rows(buffer)
    assert rows == reference_rows(buffer)
    assert [(row["properties"], row["keys"], row["tags"]) for row in rows] == [([], [], None)] * 2


# --------------------------------------------------------------------------- format v2


def varied_mix(count: int, seed: int) -> list[tuple[Message, bool, str | None]]:
    """Varied messages, every other one v2 (the first too), some with IPv6 born hosts and
    some v2 ones with a topic longer than v1 allows."""
    rng = random.Random(seed)
    mix = []
    for index in range(count):
        message = varied_message(rng, index)
        if index % 7 == 3:
            message = dataclasses.replace(message, born_host=("::1", 4000 + index))
        topic = LONG_TOPIC if index % 6 == 4 else None
        mix.append((message, index % 2 == 0, topic))
    return mix


def test_v2_records_mixed_with_v1_are_read_vectorised(slow_path_calls: list[int]) -> None:
    buffer, expected = mixed_records(varied_mix(40, seed=7))
    chain = walk_chain(buffer, 0)
    assert len(chain.positions) == 40
    assert chain.stop.kind is RecordKind.END
    rows = vector_rows(buffer)
    assert rows == expected
    assert rows[0]["topic"] == "Orders" and rows[4]["topic"] == LONG_TOPIC
    assert slow_path_calls == []


def test_v2_records_with_ipv6_store_hosts() -> None:
    buffer, expected = mixed_records(varied_mix(12, seed=8), store_host=("2001:db8::9", 10911))
    assert vector_rows(buffer) == expected


def test_v2_records_whose_properties_need_the_per_record_path(
    slow_path_calls: list[int],
) -> None:
    message = Message("T", b"x", properties={"A": "1", "B": "2"})
    buffer, _ = mixed_records([(message, True, None), (message, False, None)])
    first = bytearray(buffer)
    first[first.index(b"B\x012")] = ord("A")  # A twice in the v2 record
    rows = vector_rows(bytes(first))
    assert [row["properties"] for row in rows] == [[("A", "2")], [("A", "1"), ("B", "2")]]
    assert [row["topic"] for row in rows] == ["T", "T"]
    assert slow_path_calls == [2]


def test_v2_filters_and_a_time_window() -> None:
    buffer, expected = mixed_records(varied_mix(30, seed=9))
    since, until = STORE_TIME_0 + 5_000, STORE_TIME_0 + 20_000
    kept = vector_rows(buffer, topics=frozenset({"Orders", LONG_TOPIC}), from_ms=since, to_ms=until)
    assert kept == [
        row
        for row in expected
        if row["topic"] in {"Orders", LONG_TOPIC}
        and since <= millis(row["store_timestamp"]) < until
    ]
    assert kept


def test_a_v2_record_with_a_wrong_topic_length_stops_the_walk() -> None:
    message = Message("Topic", b"body")
    buffer, _ = mixed_records([(message, True, None)] * 3)
    second = len(buffer) // 3
    broken = bytearray(buffer)
    topic_length_at = second + 88 + len(b"body")
    assert broken[topic_length_at : topic_length_at + 2] == b"\x00\x05"
    broken[topic_length_at : topic_length_at + 2] = b"\x00\x06"
    chain = walk_chain(bytes(broken), 0)
    assert chain.positions.tolist() == [0]
    assert (chain.stop.position, chain.stop.kind) == (second, RecordKind.CORRUPT)
    negative = bytearray(buffer)
    negative[topic_length_at : topic_length_at + 2] = b"\xff\xfb"  # -5
    assert walk_chain(bytes(negative), 0).stop.position == second


def test_v2_records_in_a_file_read_by_range(tmp_path: Path) -> None:
    buffer, expected = mixed_records(varied_mix(25, seed=10), file_start=65_536, store_dir="/s")
    path = tmp_path / f"{65_536:020d}"
    path.write_bytes(buffer + bytes(4096))  # zeros after the data, as in a CommitLog file
    batches = list(read_range(ByteRange("/s", str(path), 65_536, 0, None), batch_size=8))
    assert [row for batch in batches for row in batch.to_pylist()] == expected


def test_topic_and_time_filters() -> None:
    rng = random.Random(2)
    messages = [varied_message(rng, i) for i in range(60)]
    buffer = encode_all(messages)
    everything = reference_rows(buffer)
    since, until = 1_710_000_010_000, 1_710_000_040_000
    kept = vector_rows(buffer, topics=frozenset({"Orders", "Audit"}), from_ms=since, to_ms=until)
    assert kept == [
        row
        for row in everything
        if row["topic"] in {"Orders", "Audit"} and since <= millis(row["store_timestamp"]) < until
    ]
    assert vector_rows(buffer, topics=frozenset({"Nope"})) == []


def test_the_walk_agrees_with_check_record_at_every_cut() -> None:
    rng = random.Random(4)
    buffer = encode_all([varied_message(rng, i) for i in range(12)]) + blank_record(100)
    for length in range(0, len(buffer) + 1, 7):
        cut = buffer[:length]
        chain = walk_chain(cut, 0)
        assert chain.positions.tolist() == [p for p, _ in scan_records(cut)]
        reference = scan_stop(cut)
        assert (chain.stop.position, chain.stop.kind) == (reference.position, reference.kind)
    assert walk_chain(buffer, 0).stop.kind is RecordKind.BLANK


def test_a_record_with_inconsistent_fields_stops_the_walk() -> None:
    rng = random.Random(5)
    messages = [varied_message(rng, i) for i in range(6)]
    buffer = bytearray(encode_all(messages))
    starts = [p for p, _ in scan_records(bytes(buffer))]
    buffer[starts[3] + 84 : starts[3] + 88] = (10**6).to_bytes(4, "big")  # body length
    chain = walk_chain(bytes(buffer), 0)
    assert chain.positions.tolist() == starts[:3]
    assert (chain.stop.position, chain.stop.kind) == (starts[3], RecordKind.CORRUPT)
    assert scan_stop(bytes(buffer)).position == starts[3]


def test_crc_checking_is_optional() -> None:
    buffer = bytearray(encode_all([Message("T", b"abcdef"), Message("T", b"ghijkl")]))
    buffer[buffer.index(b"ghijkl")] = ord("X")
    assert len(walk_chain(bytes(buffer), 0).positions) == 2
    checked = walk_chain(bytes(buffer), 0, check_crc=True)
    assert len(checked.positions) == 1
    assert checked.stop.kind is RecordKind.CORRUPT


def test_rows_to_batch_and_empty_batches() -> None:
    assert rows_to_batch([]).num_rows == 0
    assert build_batch(as_bytes(b""), walk_chain(b"", 0).positions, 0, "/s").num_rows == 0
    table = pa.Table.from_batches([rows_to_batch(reference_rows(encode_all([Message("T", b"1")])))])
    assert table.schema.equals(ARROW_SCHEMA)


def test_vectorised_batches_equal_the_decoder_for_every_kind_of_record(
    slow_path_calls: list[int],
) -> None:
    """v1 and v2, every host width, a batch member, keyed (idempotency) properties,
    transaction halves, empty and binary bodies, back to back; then a BLANK ends the file."""
    kinds = every_kind_of_message_record()
    records = b"".join(kind.values[0] for kind in kinds)
    buffer = records + blank_record(4096) + bytes(4088)
    chain = walk_chain(buffer, 0)
    assert len(chain.positions) == len(kinds)
    assert chain.stop.kind is RecordKind.BLANK and chain.stop.position == len(records)
    rows = vector_rows(buffer)
    assert rows == reference_rows(buffer)
    keyed = [row["properties"] for row in rows if row["uniq_key"] == "7F0000010001ABCD"]
    # the keyed record and the batch member, without the key's bookkeeping
    assert keyed == [[("KEYS", KEYED_PROPERTIES["KEYS"]), ("UNIQ_KEY", "7F0000010001ABCD")]] * 2
    assert slow_path_calls == []


def test_a_sql92_filter_keeps_the_records_whose_properties_match() -> None:
    """The store-directory source filters as the broker does: on every property (TAGS and
    KEYS included), after the topic and time filters."""
    rng = random.Random(5)
    messages = [varied_message(rng, i) for i in range(80)]
    buffer = encode_all(messages)
    everything = reference_rows(buffer)
    sql = "TAGS IN ('Paid', 'Shipped') AND KEYS IS NOT NULL"
    kept = vector_rows(buffer, sql=sql)
    assert kept == [row for row in everything if row["tags"] in ("Paid", "Shipped") and row["keys"]]
    assert 0 < len(kept) < len(everything)
    both = vector_rows(buffer, topics=frozenset({"Orders"}), sql="TAGS = 'Paid'")
    assert both == [r for r in everything if r["topic"] == "Orders" and r["tags"] == "Paid"]
    assert vector_rows(buffer, sql="TAGS = 'Nope'") == []


def test_a_range_of_records_is_walked_whole_or_refused() -> None:
    buffer = encode_all([Message("T", b"one"), Message("T", b"two")])
    data, positions = range_records(buffer)
    assert len(data) == len(buffer) and positions.tolist()[0] == 0 and len(positions) == 2
    assert build_batch(data, positions, 0, "").column("body").to_pylist() == [b"one", b"two"]
    with pytest.raises(ValueError, match="breaks off"):
        range_records(buffer[:-3])


def test_properties_without_drops_the_named_entries_of_every_row_and_of_slices() -> None:
    rows = [[("TAGS", "a"), ("n", "1")], [], [("KEYS", "k"), ("TAGS", "b")], [("m", "2")]]
    column = pa.array(rows, type=PROPERTIES_TYPE)
    assert properties_without(column, ["TAGS", "KEYS"]).to_pylist() == [
        [("n", "1")], [], [], [("m", "2")],
    ]  # fmt: skip
    assert properties_without(column.slice(2), ["TAGS"]).to_pylist() == [
        [("KEYS", "k")], [("m", "2")],
    ]  # fmt: skip
    assert properties_without(column, ["other"]) is column

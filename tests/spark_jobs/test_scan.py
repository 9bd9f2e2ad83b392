"""Planning byte ranges and reading them, without Spark; option parsing."""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path
from typing import Any

import pytest

from spark_jobs.options import (
    OptionError,
    parse_bool,
    parse_commitlog_options,
    parse_size,
    parse_time_ms,
    store_dirs_from_options,
)
from spark_jobs.records import RecordFilter, concat_batches
from spark_jobs.scan import ByteRange, plan_ranges, read_range
from storage import MessageStore
from storage.record.decode import RecordKind, check_record
from storage.store_reader import map_read_only
from tests.spark_jobs.stores import (
    CONFIG,
    FILE_SIZE,
    Written,
    expected_row,
    sorted_rows,
    tear_tail,
    varied_message,
    varied_store,
    write_store,
)


def read_all(
    ranges: list[ByteRange], record_filter: RecordFilter | None = None
) -> list[dict[str, Any]]:
    batches = [b for r in ranges for b in read_range(r, record_filter or RecordFilter())]
    return sorted_rows(concat_batches(batches).to_pylist()) if batches else []


def test_ranges_are_cut_at_record_boundaries(tmp_path: Path) -> None:
    written = varied_store(tmp_path / "store", count=500)
    ranges = plan_ranges([written[0].store_dir], split_size=10_000)
    files = {r.path for r in ranges}
    assert len(ranges) > 2 * len(files) >= 6
    for byte_range in ranges:
        with map_read_only(Path(byte_range.path)) as buffer:
            check = check_record(buffer, byte_range.start, FILE_SIZE, check_crc=True)
        assert check.kind is RecordKind.MESSAGE
    for path in files:
        in_file = [r for r in ranges if r.path == path]
        assert in_file[0].start == 0
        assert in_file[-1].end is None
        assert all(a.end == b.start for a, b in itertools.pairwise(in_file))
    assert read_all(ranges) == [expected_row(w) for w in written]


def test_small_files_are_one_range_each(tmp_path: Path) -> None:
    written = varied_store(tmp_path / "store", count=300)
    ranges = plan_ranges([written[0].store_dir], split_size=FILE_SIZE)
    assert [(r.start, r.end) for r in ranges] == [(0, None)] * len(ranges)
    assert read_all(ranges) == [expected_row(w) for w in written]


def test_a_torn_tail_is_left_out(tmp_path: Path) -> None:
    survivors = tear_tail(varied_store(tmp_path / "store", count=300))
    for split_size in (5_000, FILE_SIZE):
        ranges = plan_ranges([survivors[0].store_dir], split_size)
        assert read_all(ranges) == [expected_row(w) for w in survivors]


def test_store_times_skip_files_and_ranges(tmp_path: Path) -> None:
    rng = random.Random(8)

    def tick(index: int) -> None:
        time.sleep(0.0015)  # store times grow with the wall clock: spread them out

    written = write_store(
        tmp_path / "store", (varied_message(rng, i) for i in range(400)), before_put=tick
    )
    store_dir = written[0].store_dir
    times = [w.result.store_timestamp for w in written]
    since, until = times[150], times[230]
    window = RecordFilter(from_ms=since, to_ms=until)
    everything = plan_ranges([store_dir], split_size=8_000)
    selected = plan_ranges([store_dir], split_size=8_000, record_filter=window)
    assert 0 < len(selected) < len(everything) / 2
    assert read_all(selected, window) == [
        expected_row(w) for w in written if since <= w.result.store_timestamp < until
    ]
    late = RecordFilter(from_ms=times[-1] + 1)
    assert read_all(plan_ranges([store_dir], 8_000, late), late) == []
    early = RecordFilter(to_ms=times[0])
    assert plan_ranges([store_dir], 8_000, early) == []


def test_topics_filter_rows(tmp_path: Path) -> None:
    written = varied_store(tmp_path / "store", count=200)
    only = RecordFilter(topics=frozenset({"Payments"}))
    ranges = plan_ranges([written[0].store_dir], 20_000, only)
    assert read_all(ranges, only) == [
        expected_row(w) for w in written if w.message.topic == "Payments"
    ]


def test_a_vanished_file_and_an_empty_store_yield_nothing(tmp_path: Path) -> None:
    written = varied_store(tmp_path / "store", count=200)
    ranges = plan_ranges([written[0].store_dir], FILE_SIZE)
    Path(ranges[0].path).unlink()
    assert list(read_range(ranges[0])) == []
    assert plan_ranges([str(tmp_path / "nothing")], FILE_SIZE) == []


def test_reading_a_store_while_it_is_written(tmp_path: Path) -> None:
    rng = random.Random(9)
    store_dir = tmp_path / "store"
    with MessageStore.open(store_dir, CONFIG) as store:
        first = [
            Written(str(store_dir.resolve()), m, store.put([m])[0])
            for m in (varied_message(rng, i) for i in range(100))
        ]
        ranges = plan_ranges([str(store_dir.resolve())], split_size=6_000)
        assert read_all(ranges) == [expected_row(w) for w in first]
        more = [
            Written(str(store_dir.resolve()), m, store.put([m])[0])
            for m in (varied_message(rng, i) for i in range(100, 130))
        ]
        # The last range of the last file reads to the end of data at read time.
        rows = read_all(ranges)
        written_in_planned_files = [
            w
            for w in first + more
            if w.result.physical_offset < int(Path(ranges[-1].path).name) + FILE_SIZE
        ]
        assert rows == [expected_row(w) for w in written_in_planned_files]


# --------------------------------------------------------------------------- options


def test_times_sizes_and_booleans() -> None:
    assert parse_time_ms("1714557600000") == 1_714_557_600_000
    assert parse_time_ms("2024-05-01T10:00:00Z") == 1_714_557_600_000
    assert parse_time_ms("2024-05-01T12:00:00+02:00") == 1_714_557_600_000
    assert parse_time_ms("2024-05-01 10:00") == 1_714_557_600_000
    assert parse_time_ms("") is None
    with pytest.raises(OptionError, match="ISO 8601"):
        parse_time_ms("yesterday")
    assert parse_size("64m", 1) == 64 * 1024**2
    assert parse_size("1GiB", 1) == 1024**3
    assert parse_size(None, 5) == 5
    with pytest.raises(OptionError):
        parse_size("lots", 1)
    assert parse_bool("TRUE") and not parse_bool("0") and parse_bool(None, default=True)


def test_store_dirs_and_commitlog_options(tmp_path: Path) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert store_dirs_from_options({"path": a}) == [a]
    assert store_dirs_from_options({"paths": f'["{a}", "{b}"]'}) == [a, b]
    assert store_dirs_from_options({"stores": f"{a},{b},{a}"}) == [a, b]
    with pytest.raises(OptionError, match="no store directory"):
        store_dirs_from_options({})
    options = parse_commitlog_options(
        {"path": a, "topics": "A, B", "from_time": "1000", "to_time": "2000", "split_size": "1m"}
    )
    assert options.record_filter == RecordFilter(frozenset({"A", "B"}), 1000, 2000)
    assert options.split_size == 1024 * 1024
    with pytest.raises(OptionError, match="after from_time"):
        parse_commitlog_options({"path": a, "from_time": "2000", "to_time": "1000"})

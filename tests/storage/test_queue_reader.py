"""queue_reader: GetMessageStatus by offset, the batch caps, reads decoded or as views, and
range reads of records as stored."""

from __future__ import annotations

import pytest

from storage import GetMessageStatus, MessageStore, StoreConfig, TagFilter
from storage.queue_reader import position_status
from storage.record.decode import decode_record, walk_records
from storage.record.fields import NamedView
from storage.record.layout import CQ_UNIT_SIZE, CQ_UNIT_STRUCT, PRE_BLANK_SIZE
from tests.storage.conftest import TINY_CONFIG, message
from tests.storage.record.golden import expected_view


@pytest.mark.parametrize(
    ("offset", "min_offset", "max_offset", "expected"),
    [
        pytest.param(0, 0, 0, (GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0), id="empty"),
        pytest.param(1, 3, 9, (GetMessageStatus.OFFSET_TOO_SMALL, 3), id="too-small"),
        pytest.param(9, 3, 9, (GetMessageStatus.OFFSET_OVERFLOW_ONE, 9), id="overflow-one"),
        pytest.param(20, 3, 9, (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 9), id="badly"),
        pytest.param(20, 0, 9, (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0), id="badly-from-0"),
        pytest.param(5, 3, 9, (None, 5), id="read-units"),
    ],
)
def test_the_offset_alone_decides_these_statuses(
    offset: int, min_offset: int, max_offset: int, expected: tuple[object, int]
) -> None:
    assert position_status(offset, min_offset, max_offset) == expected
    # A slave answers the same status, and leaves the consumer where it asked.
    status, _ = expected
    assert position_status(offset, min_offset, max_offset, on_slave=True) == (status, offset)


def test_a_slave_moves_no_consumer_far_past_the_end_or_in_an_unknown_queue(
    store: MessageStore,
) -> None:
    fill(store, 5)
    for on_slave, next_offset in ((False, 0), (True, 1000)):
        badly = store.get_message("g", "TopicA", 0, 1000, on_slave=on_slave)
        assert (badly.status, badly.next_begin_offset, badly.max_offset) == (
            GetMessageStatus.OFFSET_OVERFLOW_BADLY,
            next_offset,
            5,
        )
        unknown = store.get_message("g", "TopicA", 7, 1000, on_slave=on_slave)
        assert (unknown.status, unknown.next_begin_offset) == (
            GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
            next_offset,
        )


def fill(store: MessageStore, count: int) -> None:
    for index in range(count):
        tags = "even" if index % 2 == 0 else "odd"
        store.put([message(body=f"body-{index}".encode(), tags=tags, keys=f"k{index}")])


@pytest.mark.parametrize("tags", [None, "odd"])
@pytest.mark.parametrize("offset", [0, 7])
def test_a_read_for_views_finds_what_a_decoded_read_finds(
    store: MessageStore, tags: str | None, offset: int
) -> None:
    fill(store, 30)  # several 4 KiB CommitLog files and 10-unit ConsumeQueue files
    tag_filter = None if tags is None else TagFilter(tags)
    decoded = store.get_message("g", "TopicA", 0, offset, 32, tag_filter=tag_filter)
    seen = store.get_message("g", "TopicA", 0, offset, 32, tag_filter=tag_filter, views=True)
    assert seen.status is decoded.status is GetMessageStatus.FOUND
    assert (seen.next_begin_offset, seen.min_offset, seen.max_offset) == (
        decoded.next_begin_offset,
        decoded.min_offset,
        decoded.max_offset,
    )
    assert seen.messages == [] and decoded.views == []
    assert [NamedView._make(v) for v in seen.views] == [expected_view(m) for m in decoded.messages]


def test_reads_for_views_keep_the_batch_caps(open_store: object) -> None:
    config = StoreConfig(
        commit_log_file_size=64 * 1024,
        consume_queue_units_per_file=100,
        max_transfer_count_in_memory=5,
        max_transfer_bytes_in_memory=10_000,
    )
    store = open_store(config)  # type: ignore[operator]
    fill(store, 20)
    assert len(store.get_message("g", "TopicA", 0, 0, 32, views=True).views) == 5
    assert len(store.get_message("g", "TopicA", 0, 0, 3, views=True).views) == 3
    one = store.get_message("g", "TopicA", 0, 0, 32, max_bytes=10, views=True)
    assert len(one.views) == 1  # the first message always goes out
    assert one.next_begin_offset == 1


def test_a_read_for_views_with_nothing_matching_counts_what_it_skipped(store: MessageStore) -> None:
    fill(store, 6)
    result = store.get_message("g", "TopicA", 0, 0, 32, tag_filter=TagFilter("none"), views=True)
    assert result.status is GetMessageStatus.NO_MATCHED_MESSAGE
    assert (result.views, result.next_begin_offset) == ([], 6)


def test_views_do_not_hold_the_store_files(open_store: object, store_dir: object) -> None:
    store = open_store(TINY_CONFIG)  # type: ignore[operator]
    fill(store, 3)
    views = store.get_message("g", "TopicA", 0, 0, 32, views=True).views
    store.close()  # unmaps every file: would fail if a view still pointed into one
    named = [NamedView._make(v) for v in views]
    assert [v.body for v in named] == [b"body-0", b"body-1", b"body-2"]
    assert (named[2].tags, named[2].keys, named[2].properties) == ("even", ["k2"], {})


def _overwrite_units(store: MessageStore, units: dict[int, tuple[int, int, int]]) -> None:
    """Put these (physical offset, size, tags code) units at these queue offsets, in place."""
    queue = store.consume_queue_table.find("TopicA", 0)
    assert queue is not None
    for index, unit in units.items():
        mapped = queue.queue.find_by_offset(index * CQ_UNIT_SIZE)
        assert mapped is not None
        at = index * CQ_UNIT_SIZE - mapped.file_from_offset
        mapped.buffer[at : at + CQ_UNIT_SIZE] = CQ_UNIT_STRUCT.pack(*unit)


BLANK = (0, PRE_BLANK_SIZE, 0)
GONE = (10**12, 100, 0)  # far beyond the CommitLog: no file holds it


@pytest.mark.parametrize("views", [True, False])
@pytest.mark.parametrize(
    ("units", "max_messages", "expected", "next_offset"),
    [
        pytest.param({0: BLANK, 1: BLANK, 2: BLANK}, 3, [3, 4, 5], 6, id="first-units-blank"),
        pytest.param({1: GONE, 2: GONE}, 3, [0, 3, 4], 5, id="units-gone"),
        pytest.param({0: GONE, 1: BLANK, 2: GONE}, 2, [3, 4], 5, id="blank-and-gone"),
        pytest.param(dict.fromkeys(range(10), BLANK), 3, [], 10, id="a-whole-file-blank"),
        pytest.param({9: BLANK}, 9, list(range(9)), 9, id="exactly-max-then-blank"),
        pytest.param({}, 12, list(range(10)), 10, id="to-the-end-of-the-file"),
    ],
)
def test_units_that_are_blank_or_gone_do_not_cut_a_read_short(
    store: MessageStore,
    units: dict[int, tuple[int, int, int]],
    max_messages: int,
    expected: list[int],
    next_offset: int,
    views: bool,
) -> None:
    # A read without a tag filter first looks at max_messages units only; units that give
    # no record must not make it return fewer records than the whole window holds.
    fill(store, 30)  # 10-unit ConsumeQueue files: a read stays within one
    _overwrite_units(store, units)
    result = store.get_message("g", "TopicA", 0, 0, max_messages, views=views)
    found = [NamedView._make(v).body for v in result.views] if views else []
    found += [m.body for m in result.messages]
    assert found == [f"body-{n}".encode() for n in expected]
    assert result.next_begin_offset == next_offset
    assert result.status is (
        GetMessageStatus.FOUND if expected else GetMessageStatus.NO_MATCHED_MESSAGE
    )


# ------------------------------------------------------------------ range reads


def range_bodies(records: bytes) -> list[bytes]:
    """The bodies of a range read's records, walked with the store's own framing."""
    positions, stop = walk_records(records, 0, len(records), len(records))
    assert stop.position == len(records)
    return [decode_record(records, at).body for at in positions]


def test_a_range_read_answers_the_records_as_stored_across_files(store: MessageStore) -> None:
    fill(store, 30)  # three ConsumeQueue files, several CommitLog files
    read = store.read_records("TopicA", 0, 3, 1 << 20)
    assert (read.status, read.next_begin_offset, read.count) == (GetMessageStatus.FOUND, 30, 27)
    assert (read.min_offset, read.max_offset) == (0, 30)
    assert range_bodies(read.records) == [f"body-{n}".encode() for n in range(3, 30)]
    first = store.get_message("g", "TopicA", 0, 3, 1).messages[0]
    assert read.records[: first.size] == bytes(
        store.commit_log.read(first.physical_offset, first.size) or b""
    )


def test_a_range_read_keeps_its_byte_budget_but_always_gives_the_first_record(
    store: MessageStore,
) -> None:
    fill(store, 12)
    size = store.get_message("g", "TopicA", 0, 0, 1).messages[0].size
    one = store.read_records("TopicA", 0, 0, 1)
    assert (one.count, one.next_begin_offset, len(one.records)) == (1, 1, size)
    three = store.read_records("TopicA", 0, 4, size * 3 + size // 2)
    assert (three.count, three.next_begin_offset) == (3, 7)
    assert range_bodies(three.records) == [b"body-4", b"body-5", b"body-6"]
    ended = store.read_records("TopicA", 0, 4, 1 << 20, end_offset=6)
    assert (ended.count, ended.next_begin_offset) == (2, 6)


def test_a_range_read_filters_as_a_pull_and_counts_what_it_skipped(store: MessageStore) -> None:
    fill(store, 25)
    odd = store.read_records("TopicA", 0, 0, 1 << 20, TagFilter("odd"))
    assert odd.next_begin_offset == 25
    assert range_bodies(odd.records) == [f"body-{n}".encode() for n in range(1, 25, 2)]
    tested = store.read_records(
        "TopicA", 0, 0, 1 << 20, property_filter=lambda p: p.get("KEYS") in ("k3", "k21")
    )
    assert (tested.status, tested.count, tested.next_begin_offset) == (
        GetMessageStatus.FOUND,
        2,
        25,
    )
    none = store.read_records("TopicA", 0, 0, 1 << 20, TagFilter("nothing"))
    assert (none.status, none.count, none.records, none.next_begin_offset) == (
        GetMessageStatus.NO_MATCHED_MESSAGE,
        0,
        b"",
        25,
    )


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        pytest.param(5, (GetMessageStatus.OFFSET_OVERFLOW_ONE, 5), id="at-the-end"),
        pytest.param(9, (GetMessageStatus.OFFSET_OVERFLOW_BADLY, 0), id="past-the-end"),
    ],
)
def test_a_range_read_past_the_end_answers_a_pulls_status(
    store: MessageStore, offset: int, expected: tuple[GetMessageStatus, int]
) -> None:
    fill(store, 5)
    read = store.read_records("TopicA", 0, offset, 1 << 20)
    assert (read.status, read.next_begin_offset, read.records) == (*expected, b"")
    unknown = store.read_records("TopicA", 3, 0, 1 << 20)
    assert unknown.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE


def test_a_range_read_skips_blank_units_and_says_when_records_are_gone(
    store: MessageStore,
) -> None:
    fill(store, 30)
    _overwrite_units(store, {1: GONE, 2: BLANK})
    read = store.read_records("TopicA", 0, 0, 1 << 20, end_offset=5)
    assert range_bodies(read.records) == [b"body-0", b"body-3", b"body-4"]
    assert read.next_begin_offset == 5
    _overwrite_units(store, {0: GONE})
    gone = store.read_records("TopicA", 0, 0, 1 << 20, end_offset=2)
    assert (gone.status, gone.count, gone.next_begin_offset) == (
        GetMessageStatus.MESSAGE_WAS_REMOVING,
        0,
        2,
    )


def test_a_range_read_below_the_min_offset_answers_offset_too_small(
    store: MessageStore,
) -> None:
    fill(store, 60)  # several 4 KiB CommitLog files
    store.flush_all()
    assert store.commit_log.queue.delete_expired_by_time(0, clean_immediately=True) >= 1
    store.after_commit_log_deleted()
    low = store.min_offset_in_queue("TopicA", 0)
    assert low > 0
    read = store.read_records("TopicA", 0, 0, 1 << 20)
    assert (read.status, read.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, low)

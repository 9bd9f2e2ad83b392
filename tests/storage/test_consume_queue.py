"""ConsumeQueue: units, idempotent put, pre-blank fill, min/max, reads, search by time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage.consume_queue import (
    ConsumeQueue,
    is_readable_unit,
    is_valid_unit,
    readable_start,
)
from storage.mapped_file import RESERVE_CHUNK, offset_to_file_name
from storage.record.layout import CQ_UNIT_STRUCT, PRE_BLANK_SIZE

UNITS = 10  # units per file: 200-byte files
PRE_BLANK = (0, 0x7FFFFFFF, 0)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "consumequeue"


@pytest.fixture
def cq(root: Path) -> Iterator[ConsumeQueue]:
    queue = ConsumeQueue(root, "TopicA", 3, UNITS)
    queue.load()
    yield queue
    queue.close()


def put_range(cq: ConsumeQueue, start: int, stop: int, size: int = 100) -> None:
    """Units for queue offsets [start, stop): message n at physical n*size, tags code n."""
    for n in range(start, stop):
        assert cq.put(n * size, size, n, n)


def files_on_disk(cq: ConsumeQueue) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cq.queue.directory.iterdir())}


# ---------------------------------------------------------------- put and read


def test_layout_on_disk(cq: ConsumeQueue, root: Path) -> None:
    cq.put(4096, 158, -862545276, 0)
    path = root / "TopicA" / "3" / offset_to_file_name(0)
    data = path.read_bytes()
    assert len(data) == UNITS * 20
    assert data[:20] == CQ_UNIT_STRUCT.pack(4096, 158, -862545276)
    assert data[20:] == bytes(180)


def test_min_max_and_units(cq: ConsumeQueue) -> None:
    assert (cq.min_offset, cq.max_offset, cq.message_total) == (0, 0, 0)
    put_range(cq, 0, 25)
    assert (cq.min_offset, cq.max_offset, cq.message_total) == (0, 25, 25)
    assert [f.file_from_offset for f in cq.queue.files] == [0, 200, 400]
    for n in (0, 9, 10, 24):
        assert cq.get_unit(n) == (n * 100, 100, n)
    assert cq.get_unit(25) is None
    assert cq.get_unit(-1) is None
    assert cq.max_physic_offset == 2500


def test_get_units_never_crosses_a_file(cq: ConsumeQueue) -> None:
    put_range(cq, 0, 25)
    found = cq.get_units(7)
    assert found is not None
    data, start = found
    assert start == 7
    assert [u[2] for u in CQ_UNIT_STRUCT.iter_unpack(data)] == [7, 8, 9]
    found = cq.get_units(10)
    assert found is not None
    assert [u[2] for u in CQ_UNIT_STRUCT.iter_unpack(found[0])] == list(range(10, 20))
    found = cq.get_units(22)
    assert found is not None
    assert [u[2] for u in CQ_UNIT_STRUCT.iter_unpack(found[0])] == [22, 23, 24]


def test_get_units_byte_cap_and_out_of_range(cq: ConsumeQueue) -> None:
    put_range(cq, 0, 25)
    found = cq.get_units(10, max_bytes=60)
    assert found is not None
    assert [u[2] for u in CQ_UNIT_STRUCT.iter_unpack(found[0])] == [10, 11, 12]
    assert cq.get_units(25) is None  # at the max offset: nothing readable
    assert cq.get_units(40) is None
    assert cq.get_units(-1) is None


def test_roll_next_file(cq: ConsumeQueue) -> None:
    assert cq.roll_next_file(0) == 10
    assert cq.roll_next_file(7) == 10
    assert cq.roll_next_file(10) == 20


# ---------------------------------------------------------------- idempotence


def test_reputting_the_same_units_changes_nothing(cq: ConsumeQueue) -> None:
    put_range(cq, 0, 15)
    before = files_on_disk(cq)
    put_range(cq, 0, 15)
    put_range(cq, 5, 15)
    assert files_on_disk(cq) == before
    assert cq.max_offset == 15
    put_range(cq, 15, 16)
    assert cq.max_offset == 16


def test_reputting_after_reload_changes_nothing(cq: ConsumeQueue, root: Path) -> None:
    put_range(cq, 0, 15)
    cq.close()
    again = ConsumeQueue(root, "TopicA", 3, UNITS)
    again.load()
    again.recover()
    try:
        before = files_on_disk(again)
        put_range(again, 0, 15)
        assert files_on_disk(again) == before
        assert again.max_offset == 15
        assert again.max_physic_offset == 1500
    finally:
        again.close()


def test_a_stale_unit_below_the_write_position_is_skipped(cq: ConsumeQueue) -> None:
    # Same logical slot, a physical offset beyond what the queue has seen (e.g. a
    # re-dispatch after the max physical offset was forgotten): still not written twice.
    put_range(cq, 0, 5)
    before = files_on_disk(cq)
    cq.max_physic_offset = -1
    assert cq.put(10_000, 100, 99, 3)
    assert files_on_disk(cq) == before
    assert cq.max_offset == 5


# ---------------------------------------------------------------- pre-blank fill


def test_pre_blank_fill_when_the_first_file_starts_at_a_non_zero_offset(
    cq: ConsumeQueue,
) -> None:
    assert cq.put(5000, 100, 42, 13)
    # Unit 13 lives in the second 10-unit file; its first three slots are pre-blank.
    assert [f.path.name for f in cq.queue.files] == [offset_to_file_name(200)]
    data = cq.queue.files[0].buffer[:80]
    units = list(CQ_UNIT_STRUCT.iter_unpack(data))
    assert units == [PRE_BLANK, PRE_BLANK, PRE_BLANK, (5000, 100, 42)]
    assert (cq.min_offset, cq.max_offset) == (13, 14)
    assert cq.get_unit(13) == (5000, 100, 42)
    assert cq.get_unit(12) is None  # below the min offset
    assert cq.get_units(12) is None
    found = cq.get_units(13)
    assert found is not None
    assert list(CQ_UNIT_STRUCT.iter_unpack(found[0])) == [(5000, 100, 42)]
    assert cq.put(5100, 100, 43, 14)
    assert cq.max_offset == 15


def test_pre_blank_fill_at_a_file_start_writes_no_blanks(cq: ConsumeQueue) -> None:
    assert cq.put(5000, 100, 1, 20)
    assert [f.path.name for f in cq.queue.files] == [offset_to_file_name(400)]
    assert cq.queue.files[0].wrote_position == 20
    assert (cq.min_offset, cq.max_offset) == (20, 21)


def test_pre_blank_queue_keeps_its_min_offset_after_reload(cq: ConsumeQueue, root: Path) -> None:
    put_range(cq, 13, 17)
    cq.close()
    again = ConsumeQueue(root, "TopicA", 3, UNITS)
    again.load()
    again.recover()
    again.correct_min_offset(0)
    try:
        assert (again.min_offset, again.max_offset) == (13, 17)
    finally:
        again.close()


def test_put_beyond_the_end_fills_the_hole_and_keeps_positions(cq: ConsumeQueue) -> None:
    put_range(cq, 0, 3)
    assert cq.put(1200, 100, 12, 12)
    assert cq.max_offset == 13
    assert cq.get_unit(12) == (1200, 100, 12)
    assert cq.get_unit(5) == PRE_BLANK


# ---------------------------------------------------------------- offset by time


def search(cq: ConsumeQueue, times: dict[int, int], timestamp: int, min_physic: int = 0) -> int:
    """RocketMQ's search: the closest message."""
    return cq.offset_by_time(timestamp, _store_time_of(times), min_physic)


def search_lower(
    cq: ConsumeQueue, times: dict[int, int], timestamp: int, min_physic: int = 0
) -> int:
    """The first message at or after the time."""
    return cq.first_offset_stored_at_or_after(timestamp, _store_time_of(times), min_physic)


def _store_time_of(times: dict[int, int]) -> Callable[[int, int], int]:
    def store_time_of(physical: int, size: int) -> int:
        return times.get(physical, -1)

    return store_time_of


@pytest.fixture
def timed(cq: ConsumeQueue) -> dict[int, int]:
    """25 messages stored at 1000, 1010, 1020, ... 1240, across three files."""
    put_range(cq, 0, 25)
    return {n * 100: 1000 + 10 * n for n in range(25)}


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        pytest.param(1000, 0, id="exact-first"),
        pytest.param(1120, 12, id="exact-middle"),
        pytest.param(1240, 24, id="exact-last"),
        pytest.param(1123, 12, id="between-the-earlier-is-closer"),
        pytest.param(1127, 13, id="between-the-later-is-closer"),
        pytest.param(1125, 12, id="between-a-tie-goes-to-the-earlier"),
        pytest.param(1001, 0, id="just-after-first"),
        pytest.param(1009, 1, id="just-before-second"),
        pytest.param(0, 0, id="before-all-is-the-min-offset"),
        pytest.param(9999, 24, id="after-all-is-max-minus-one"),
        pytest.param(1095, 9, id="across-a-file-end-to-the-earlier"),
        pytest.param(1096, 10, id="across-a-file-end-to-the-later"),
    ],
)
def test_offset_by_time_is_the_closest_message(
    cq: ConsumeQueue, timed: dict[int, int], timestamp: int, expected: int
) -> None:
    assert search(cq, timed, timestamp) == expected


@pytest.mark.parametrize(
    ("timestamp", "expected"),
    [
        pytest.param(1120, 12, id="exact"),
        pytest.param(1121, 13, id="between-goes-to-the-later"),
        pytest.param(0, 0, id="before-all"),
        pytest.param(9999, 25, id="after-all-is-the-max-offset"),
    ],
)
def test_first_offset_stored_at_or_after(
    cq: ConsumeQueue, timed: dict[int, int], timestamp: int, expected: int
) -> None:
    assert search_lower(cq, timed, timestamp) == expected


def test_offset_by_time_with_equal_store_times_finds_the_first(cq: ConsumeQueue) -> None:
    put_range(cq, 0, 20)
    times = {n * 100: 1000 + 10 * (n // 4) for n in range(20)}
    assert search(cq, times, 1010) == 4
    assert search(cq, times, 1040) == 16
    assert search(cq, times, 1012) == 7, "the last of the earlier group is the neighbour"
    assert search(cq, times, 1018) == 8


def test_offset_by_time_skips_messages_gone_from_the_commit_log(
    cq: ConsumeQueue, timed: dict[int, int]
) -> None:
    # Units below the CommitLog's min offset count as too early and are never answered.
    assert search(cq, timed, 0, min_physic=500) == 5
    assert search(cq, timed, 1021, min_physic=500) == 5
    assert search(cq, timed, 9999, min_physic=2500) == 25, "nothing readable"
    assert search_lower(cq, timed, 0, min_physic=500) == 5


def test_offset_by_time_treats_a_vanished_record_as_too_early(
    cq: ConsumeQueue, timed: dict[int, int]
) -> None:
    del timed[0], timed[100]  # the store time lookup fails for the first two
    assert search(cq, timed, 1000) == 2


def test_offset_by_time_of_an_empty_queue(cq: ConsumeQueue) -> None:
    assert search(cq, {}, 1000) == 0
    assert search_lower(cq, {}, 1000) == 0


def test_offset_by_time_honours_the_min_offset(cq: ConsumeQueue) -> None:
    put_range(cq, 13, 20)
    times = {n * 100: 1000 + n for n in range(13, 20)}
    assert search(cq, times, 0) == 13
    assert search(cq, times, 1015) == 15
    assert search(cq, times, 5000) == 19
    assert search_lower(cq, times, 5000) == 20


# ---------------------------------------------------------------- reload


def test_reload_keeps_units_across_files(cq: ConsumeQueue, root: Path) -> None:
    put_range(cq, 0, 23)
    cq.close()
    again = ConsumeQueue(root, "TopicA", 3, UNITS)
    again.load()
    again.recover()
    try:
        assert (again.min_offset, again.max_offset) == (0, 23)
        assert [again.get_unit(n) for n in range(23)] == [(n * 100, 100, n) for n in range(23)]
        assert again.put(2300, 100, 23, 23)
        assert again.max_offset == 24
    finally:
        again.close()


def test_reload_of_an_exactly_full_file(cq: ConsumeQueue, root: Path) -> None:
    put_range(cq, 0, 10)
    cq.close()
    again = ConsumeQueue(root, "TopicA", 3, UNITS)
    again.load()
    again.recover()
    try:
        assert again.max_offset == 10
        assert again.put(1000, 100, 10, 10)
        assert [f.file_from_offset for f in again.queue.files] == [0, 200]
        assert again.get_unit(10) == (1000, 100, 10)
    finally:
        again.close()


# ---------------------------------------------------------------- batches of units


def packed_units(start: int, stop: int, size: int = 100) -> bytes:
    return b"".join(CQ_UNIT_STRUCT.pack(n * size, size, n) for n in range(start, stop))


@pytest.mark.parametrize(
    "batches",
    [
        [(0, 1), (1, 4), (4, 10), (10, 13)],  # fills a file exactly, then starts the next
        [(0, 3), (3, 12), (12, 25)],  # batches straddling file ends
        [(5, 8), (8, 9)],  # a queue starting at offset 5: pre-blank units first
        [(0, 2), (4, 6)],  # a hole: filled with pre-blank units, as one put would
    ],
)
def test_put_units_writes_what_unit_by_unit_puts_write(
    root: Path, batches: list[tuple[int, int]]
) -> None:
    one_by_one = ConsumeQueue(root / "single", "TopicA", 3, UNITS)
    packed = ConsumeQueue(root / "packed", "TopicA", 3, UNITS)
    for start, stop in batches:
        put_range(one_by_one, start, stop)
        assert packed.put_units(start, packed_units(start, stop))
    assert files_on_disk(packed) == files_on_disk(one_by_one)
    assert packed.max_physic_offset == one_by_one.max_physic_offset
    assert (packed.min_offset, packed.max_offset) == (one_by_one.min_offset, one_by_one.max_offset)
    one_by_one.close()
    packed.close()


def test_put_units_skips_units_already_in_place(cq: ConsumeQueue) -> None:
    assert cq.put_units(0, packed_units(0, 4))
    before = files_on_disk(cq)
    assert cq.put_units(0, packed_units(0, 4))  # a re-dispatch of the same batch
    assert cq.put_units(2, packed_units(2, 4))
    assert files_on_disk(cq) == before
    assert cq.max_offset == 4


# ---------------------------------------------------------------- the unit rules


def test_a_unit_is_valid_with_an_offset_and_a_size_and_readable_unless_filler_or_expired() -> None:
    assert is_valid_unit(0, 1) and is_valid_unit(*PRE_BLANK[:2])
    assert not is_valid_unit(-1, 10) and not is_valid_unit(0, 0) and not is_valid_unit(5, -3)
    assert is_readable_unit(4096, 158, min_physical_offset=4096)
    assert not is_readable_unit(4095, 158, min_physical_offset=4096)
    assert not is_readable_unit(0, PRE_BLANK_SIZE, min_physical_offset=0)


def test_readable_start_skips_fillers_and_expired_units_and_stops_at_the_data_end() -> None:
    run = [PRE_BLANK, PRE_BLANK, (100, 50, 0), (150, 50, 0), (200, 50, 0)]
    assert readable_start(run, min_physical_offset=0) == (2, True)
    assert readable_start(run, min_physical_offset=150) == (3, True)
    assert readable_start(run, min_physical_offset=1000) == (5, False)
    assert readable_start([PRE_BLANK, (0, 0, 0), (300, 5, 0)], 0) == (1, False)


def test_a_queue_takes_disk_as_it_fills_not_a_file_at_a_time(root: Path) -> None:
    units = 300_000  # the default file: 6 MB
    queue = ConsumeQueue(root, "TopicA", 0, units)
    queue.load()
    try:
        assert queue.put(0, 100, 0, 0)
        path = root / "TopicA" / "0" / offset_to_file_name(0)
        assert path.stat().st_size == units * 20
        assert 0 < path.stat().st_blocks * 512 <= RESERVE_CHUNK
        batch = b"".join(CQ_UNIT_STRUCT.pack(n * 100, 100, 0) for n in range(1, 5000))
        assert queue.put_units(1, batch)  # 100,000 bytes: across two chunk boundaries
        assert queue.max_offset == 5000
        assert queue.get_unit(4999) == (499_900, 100, 0)
        assert path.stat().st_blocks * 512 <= 2 * RESERVE_CHUNK
    finally:
        queue.close()

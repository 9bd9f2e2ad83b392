"""MappedFileQueue: load, create and roll, find by offset and time, truncate, delete."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.errors import StoreLoadError
from storage.mapped_file import MappedFile, offset_to_file_name
from storage.mapped_file_queue import DELETE_FILES_BATCH_MAX, MappedFileQueue

SIZE = 1024


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "files"


@pytest.fixture
def queue(directory: Path) -> Iterator[MappedFileQueue]:
    q = MappedFileQueue(directory, SIZE)
    q.load()
    yield q
    q.close()


def fill(queue: MappedFileQueue, files: int) -> list[MappedFile]:
    """Append until ``files`` files exist and all but the last are full."""
    created = []
    for _ in range(files):
        mapped = queue.get_last_mapped_file()
        assert mapped is not None
        assert mapped.append(b"x" * mapped.remaining)
        created.append(mapped)
    return created


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def age(mapped: MappedFile, seconds_ago: float) -> None:
    when = mapped.path.stat().st_mtime - seconds_ago
    os.utime(mapped.path, (when, when))


# ---------------------------------------------------------------- create and roll


def test_empty_queue(queue: MappedFileQueue) -> None:
    assert queue.files == []
    assert queue.min_offset == -1
    assert queue.max_offset == 0
    assert queue.find_by_offset(0) is None
    assert queue.find_by_offset(0, return_first_on_not_found=True) is None
    assert queue.get_last_mapped_file(create=False) is None


def test_first_file_is_created_at_the_start_offset_rounded_down(
    queue: MappedFileQueue, directory: Path
) -> None:
    mapped = queue.get_last_mapped_file(start_offset=3 * SIZE + 17)
    assert mapped is not None
    assert mapped.file_from_offset == 3 * SIZE
    assert mapped.first_create_in_queue
    assert names(directory) == [offset_to_file_name(3 * SIZE)]
    assert queue.min_offset == 3 * SIZE
    assert queue.max_offset == 3 * SIZE


def test_roll_creates_the_next_file_only_when_the_last_is_full(
    queue: MappedFileQueue, directory: Path
) -> None:
    first = queue.get_last_mapped_file()
    assert first is not None
    first.append(b"x" * (SIZE - 1))
    assert queue.get_last_mapped_file() is first
    first.append(b"x")
    second = queue.get_last_mapped_file()
    assert second is not None and second is not first
    assert second.file_from_offset == SIZE
    assert not second.first_create_in_queue
    assert names(directory) == [offset_to_file_name(0), offset_to_file_name(SIZE)]
    assert all(len(name) == 20 for name in names(directory))
    second.append(b"abc")
    assert queue.max_offset == SIZE + 3
    assert queue.max_wrote_offset == SIZE + 3
    assert queue.roll_next_file(SIZE + 3) == 2 * SIZE
    assert queue.roll_next_file(2 * SIZE) == 3 * SIZE


def test_get_last_without_create_returns_the_full_last_file(queue: MappedFileQueue) -> None:
    (only,) = fill(queue, 1)
    assert queue.get_last_mapped_file(create=False) is only
    assert len(queue.files) == 1


# ---------------------------------------------------------------- find_by_offset


def test_find_by_offset(queue: MappedFileQueue) -> None:
    files = fill(queue, 3)
    assert queue.find_by_offset(0) is files[0]
    assert queue.find_by_offset(SIZE - 1) is files[0]
    assert queue.find_by_offset(SIZE) is files[1]
    assert queue.find_by_offset(3 * SIZE - 1) is files[2]


@pytest.mark.parametrize(
    "offset",
    [
        pytest.param(3 * SIZE, id="end-of-last-file"),
        pytest.param(100 * SIZE, id="far-beyond"),
        pytest.param(-1, id="negative"),
    ],
)
def test_find_by_offset_out_of_range(queue: MappedFileQueue, offset: int) -> None:
    files = fill(queue, 3)
    assert queue.find_by_offset(offset) is None
    assert queue.find_by_offset(offset, return_first_on_not_found=True) is files[0]


def test_find_by_offset_after_the_first_files_are_gone(queue: MappedFileQueue) -> None:
    files = fill(queue, 4)
    queue.delete_first_files(2)
    assert queue.min_offset == 2 * SIZE
    assert queue.find_by_offset(SIZE) is None
    assert queue.find_by_offset(SIZE, return_first_on_not_found=True) is files[2]
    assert queue.find_by_offset(2 * SIZE) is files[2]
    assert queue.find_by_offset(3 * SIZE + 5) is files[3]


# ---------------------------------------------------------------- load


def test_load_maps_every_file_as_full(directory: Path) -> None:
    writer = MappedFileQueue(directory, SIZE)
    writer.load()
    fill(writer, 2)
    writer.close()
    reader = MappedFileQueue(directory, SIZE)
    reader.load()
    try:
        assert [f.file_from_offset for f in reader.files] == [0, SIZE]
        assert all(f.wrote_position == SIZE for f in reader.files)
        assert reader.max_offset == 2 * SIZE
    finally:
        reader.close()


def test_load_rejects_a_file_of_the_wrong_size_naming_it(directory: Path) -> None:
    directory.mkdir()
    (directory / offset_to_file_name(0)).write_bytes(bytes(SIZE))
    bad = directory / offset_to_file_name(SIZE)
    bad.write_bytes(bytes(SIZE - 1))
    (directory / offset_to_file_name(2 * SIZE)).write_bytes(bytes(SIZE))
    queue = MappedFileQueue(directory, SIZE)
    with pytest.raises(StoreLoadError) as excinfo:
        queue.load()
    assert str(bad) in str(excinfo.value)
    assert bad.exists()  # refused, not "repaired"


def test_load_rejects_files_made_with_another_size(directory: Path) -> None:
    directory.mkdir()
    other = directory / offset_to_file_name(0)
    other.write_bytes(bytes(2 * SIZE))
    with pytest.raises(StoreLoadError, match=offset_to_file_name(0)):
        MappedFileQueue(directory, SIZE).load()


def test_load_removes_a_zero_length_last_file(directory: Path) -> None:
    directory.mkdir()
    (directory / offset_to_file_name(0)).write_bytes(bytes(SIZE))
    empty = directory / offset_to_file_name(SIZE)
    empty.write_bytes(b"")
    queue = MappedFileQueue(directory, SIZE)
    queue.load()
    try:
        assert not empty.exists()
        assert [f.file_from_offset for f in queue.files] == [0]
    finally:
        queue.close()


def test_load_rejects_a_zero_length_file_that_is_not_last(directory: Path) -> None:
    directory.mkdir()
    empty = directory / offset_to_file_name(0)
    empty.write_bytes(b"")
    (directory / offset_to_file_name(SIZE)).write_bytes(bytes(SIZE))
    with pytest.raises(StoreLoadError, match=str(empty)):
        MappedFileQueue(directory, SIZE).load()


def test_load_rejects_a_gap_between_files(directory: Path) -> None:
    directory.mkdir()
    (directory / offset_to_file_name(0)).write_bytes(bytes(SIZE))
    (directory / offset_to_file_name(2 * SIZE)).write_bytes(bytes(SIZE))
    with pytest.raises(StoreLoadError, match=offset_to_file_name(2 * SIZE)):
        MappedFileQueue(directory, SIZE).load()


def test_load_ignores_other_entries(directory: Path) -> None:
    directory.mkdir()
    (directory / offset_to_file_name(0)).write_bytes(bytes(SIZE))
    (directory / "notes.txt").write_text("not a store file")
    (directory / "00000000000000099999.d").mkdir()
    queue = MappedFileQueue(directory, SIZE)
    queue.load()
    try:
        assert len(queue.files) == 1
    finally:
        queue.close()


# ---------------------------------------------------------------- truncate and delete


def test_truncate_dirty_files(queue: MappedFileQueue, directory: Path) -> None:
    fill(queue, 3)
    queue.truncate_dirty_files(SIZE + 100)
    assert [f.file_from_offset for f in queue.files] == [0, SIZE]
    assert names(directory) == [offset_to_file_name(0), offset_to_file_name(SIZE)]
    last = queue.files[-1]
    assert (last.wrote_position, last.flushed_position) == (100, 100)
    assert queue.files[0].wrote_position == SIZE  # files before the cut are untouched
    assert queue.max_offset == SIZE + 100
    again = queue.get_last_mapped_file()
    assert again is last  # appends continue at the cut


def test_truncate_at_a_file_boundary_keeps_an_empty_file_there(queue: MappedFileQueue) -> None:
    fill(queue, 3)
    queue.truncate_dirty_files(SIZE)
    assert [f.file_from_offset for f in queue.files] == [0, SIZE]
    assert queue.files[1].wrote_position == 0
    assert queue.max_offset == SIZE


def test_truncate_moves_flushed_where_back(queue: MappedFileQueue) -> None:
    fill(queue, 2)
    queue.flush_all()
    assert queue.flushed_where == 2 * SIZE
    queue.truncate_dirty_files(SIZE + 10)
    assert queue.flushed_where == SIZE + 10


def test_delete_last_file(queue: MappedFileQueue, directory: Path) -> None:
    files = fill(queue, 2)
    queue.delete_last_file()
    assert queue.files == [files[0]]
    assert names(directory) == [offset_to_file_name(0)]
    queue.delete_last_file()
    queue.delete_last_file()  # on an empty queue: nothing happens
    assert queue.files == []
    assert names(directory) == []


# ---------------------------------------------------------------- time


def test_find_by_time(queue: MappedFileQueue) -> None:
    files = fill(queue, 3)
    age(files[0], 300)
    age(files[1], 200)
    age(files[2], 100)
    mtimes = [f.last_modified() * 1000 for f in files]
    assert queue.find_by_time(int(mtimes[0]) - 1) is files[0]
    assert queue.find_by_time(int(mtimes[0]) + 1) is files[1]
    assert queue.find_by_time(int(mtimes[1]) + 1) is files[2]
    assert queue.find_by_time(int(mtimes[2]) + 10_000) is files[2]  # later than all: the last


def test_find_by_time_on_an_empty_queue(queue: MappedFileQueue) -> None:
    assert queue.find_by_time(0) is None


def test_delete_expired_never_deletes_the_last_file(queue: MappedFileQueue) -> None:
    files = fill(queue, 3)
    for mapped in files:
        age(mapped, 3600)
    assert queue.delete_expired_by_time(expired_ms=1000, clean_immediately=False) == 2
    assert queue.files == [files[2]]
    assert files[2].path.exists()
    assert queue.delete_expired_by_time(expired_ms=0, clean_immediately=True) == 0
    assert queue.files == [files[2]]


def test_delete_expired_stops_at_the_first_young_file(queue: MappedFileQueue) -> None:
    files = fill(queue, 5)
    age(files[0], 3600)
    age(files[1], 3600)
    # files[2] is young; files[3] is old again but lies behind it
    age(files[3], 3600)
    assert queue.delete_expired_by_time(expired_ms=60_000, clean_immediately=False) == 2
    assert queue.files == files[2:]
    assert files[3].path.exists()


def test_delete_expired_at_most_ten_per_call(queue: MappedFileQueue) -> None:
    files = fill(queue, DELETE_FILES_BATCH_MAX + 5)
    for mapped in files:
        age(mapped, 3600)
    assert queue.delete_expired_by_time(expired_ms=1000, clean_immediately=False) == 10
    assert queue.files == files[10:]
    assert queue.min_offset == 10 * SIZE
    assert queue.delete_expired_by_time(expired_ms=1000, clean_immediately=False) == 4
    assert queue.files == files[14:]


def test_delete_immediately_ignores_age(queue: MappedFileQueue) -> None:
    files = fill(queue, 3)
    assert queue.delete_expired_by_time(expired_ms=10**9, clean_immediately=False) == 0
    assert queue.delete_expired_by_time(expired_ms=10**9, clean_immediately=True) == 2
    assert queue.files == files[2:]
    assert not files[0].path.exists()


def test_delete_expired_uses_the_given_clock(queue: MappedFileQueue) -> None:
    files = fill(queue, 3)
    now_ms = int(files[0].last_modified() * 1000)
    assert queue.delete_expired_by_time(1000, False, now_ms=now_ms + 999) == 0
    assert queue.delete_expired_by_time(1000, False, now_ms=now_ms + 10_000) == 2


# ---------------------------------------------------------------- flush


def test_flush_returns_true_when_nothing_moved(queue: MappedFileQueue) -> None:
    assert queue.flush(0)  # no files
    mapped = queue.get_last_mapped_file()
    assert mapped is not None
    mapped.append(b"x" * 10)
    assert not queue.flush(0)
    assert queue.flushed_where == 10
    assert queue.flush(0)


def test_flush_all_crosses_files(queue: MappedFileQueue) -> None:
    fill(queue, 3)
    queue.flush_all()
    assert queue.flushed_where == 3 * SIZE


def test_flush_continues_after_the_files_it_pointed_into_were_deleted(
    queue: MappedFileQueue,
) -> None:
    # The flush position lags in file 1 when retention deletes files 0 and 1: the next
    # flushes must go on from the first file left, not stop for good.
    files = fill(queue, 3)
    files[0].flush(0)
    queue.flushed_where = SIZE
    queue.delete_first_files(2)
    assert queue.min_offset == 2 * SIZE
    assert queue.last_file() is files[2]
    assert not queue.flush(0)
    assert queue.flushed_where == 3 * SIZE
    assert files[2].flushed_position == SIZE

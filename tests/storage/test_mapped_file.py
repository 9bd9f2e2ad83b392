"""MappedFile: naming, append, reads up to the read position, the flush page rule, sparse
files on a full disk."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.mapped_file import OS_PAGE_SIZE, RESERVE_CHUNK, MappedFile, offset_to_file_name

ROOT = Path(__file__).resolve().parents[2]

PAGES = 8
FILE_SIZE = PAGES * OS_PAGE_SIZE


@pytest.fixture
def mapped(tmp_path: Path) -> Iterator[MappedFile]:
    mf = MappedFile(tmp_path / offset_to_file_name(FILE_SIZE * 3), FILE_SIZE, create=True)
    yield mf
    mf.close()


@pytest.mark.parametrize(
    ("offset", "name"),
    [
        pytest.param(0, "00000000000000000000", id="zero"),
        pytest.param(1073741824, "00000000001073741824", id="second-1GiB-file"),
        pytest.param(6_000_000, "00000000000006000000", id="second-cq-file"),
        pytest.param(2**63 - 1, "09223372036854775807", id="max-long"),
    ],
)
def test_file_names_are_20_digit_offsets(offset: int, name: str) -> None:
    assert offset_to_file_name(offset) == name
    assert len(name) == 20


def test_new_file_has_full_size_and_starts_at_its_name(mapped: MappedFile) -> None:
    assert mapped.path.stat().st_size == FILE_SIZE
    assert mapped.file_from_offset == FILE_SIZE * 3
    assert mapped.file_end_offset == FILE_SIZE * 4
    assert (mapped.wrote_position, mapped.flushed_position, mapped.read_position) == (0, 0, 0)
    assert not mapped.is_full
    assert mapped.remaining == FILE_SIZE


def test_creating_an_existing_file_fails_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / offset_to_file_name(0)
    first = MappedFile(path, 4096, create=True)
    first.append(b"keep")
    first.close()
    with pytest.raises(FileExistsError):
        MappedFile(path, 4096, create=True)
    assert path.read_bytes()[:4] == b"keep"


def test_append_advances_and_data_reaches_the_file(mapped: MappedFile) -> None:
    assert mapped.append(b"abc")
    assert mapped.append(bytearray(b"de"))
    assert mapped.append(memoryview(b"f"))
    assert mapped.wrote_position == 6
    assert mapped.read(0, 6) == b"abcdef"
    mapped.flush(0)
    with open(mapped.path, "rb") as f:
        assert f.read(6) == b"abcdef"


def test_append_refuses_what_does_not_fit_and_writes_nothing(mapped: MappedFile) -> None:
    assert mapped.append(b"x" * (FILE_SIZE - 10))
    assert not mapped.append(b"y" * 11)
    assert mapped.wrote_position == FILE_SIZE - 10
    assert mapped.buffer[FILE_SIZE - 10 :] == bytes(10)
    assert mapped.append(b"z" * 10)
    assert mapped.is_full
    assert mapped.remaining == 0
    assert not mapped.append(b"!")


def test_append_with_lets_a_writer_fill_in_place(mapped: MappedFile) -> None:
    def write(buffer: object, position: int) -> None:
        mapped.buffer[position : position + 4] = b"WXYZ"

    assert mapped.append_with(4, write)
    assert mapped.read(0, 4) == b"WXYZ"
    mapped.append(b"x" * (FILE_SIZE - 6))
    assert not mapped.append_with(4, write)
    assert mapped.wrote_position == FILE_SIZE - 2


def test_read_only_up_to_the_read_position(mapped: MappedFile) -> None:
    mapped.append(b"0123456789")
    assert mapped.read(0, 10) == b"0123456789"
    assert mapped.read(4, 6) == b"456789"
    assert mapped.read(4, 7) is None  # one byte beyond what was written
    assert mapped.read(10, 1) is None
    assert mapped.read(-1, 2) is None


def test_select_returns_position_to_read_position(mapped: MappedFile) -> None:
    mapped.append(b"0123456789")
    assert mapped.select(0) == b"0123456789"
    assert mapped.select(7) == b"789"
    assert mapped.select(2, 3) == b"234"
    assert mapped.select(8, 100) == b"89"  # limit never reaches past the read position
    assert mapped.select(10) is None
    assert mapped.select(11) is None
    assert mapped.select(-1) is None


def test_write_at_overwrites_below_the_write_position(mapped: MappedFile) -> None:
    mapped.append(b"aaaa")
    mapped.write_at(1, b"bb")
    assert mapped.read(0, 4) == b"abba"


# ---------------------------------------------------------------- flush(least_pages)


def test_flush_with_least_pages_waits_for_enough_dirty_pages(mapped: MappedFile) -> None:
    mapped.append(b"x" * (3 * OS_PAGE_SIZE + 100))
    assert not mapped.is_able_to_flush(4)
    assert mapped.flush(4) == 0
    assert mapped.flushed_position == 0
    mapped.append(b"x" * OS_PAGE_SIZE)  # now 4 whole dirty pages
    assert mapped.is_able_to_flush(4)
    assert mapped.flush(4) == 4 * OS_PAGE_SIZE + 100
    assert mapped.flushed_position == 4 * OS_PAGE_SIZE + 100


def test_flush_counts_pages_not_bytes(mapped: MappedFile) -> None:
    # The rule compares page numbers: flushed at byte 100 (page 0), written to byte
    # 4*4096-1 (page 3) is 3 pages; one more byte reaches page 4.
    mapped.append(b"x" * 100)
    mapped.flush(0)
    mapped.append(b"x" * (4 * OS_PAGE_SIZE - 100 - 1))
    assert not mapped.is_able_to_flush(4)
    mapped.append(b"x")
    assert mapped.is_able_to_flush(4)


def test_flush_zero_flushes_any_dirty_byte(mapped: MappedFile) -> None:
    assert not mapped.is_able_to_flush(0)
    assert mapped.flush(0) == 0
    mapped.append(b"x")
    assert mapped.is_able_to_flush(0)
    assert mapped.flush(0) == 1
    assert not mapped.is_able_to_flush(0)


def test_a_full_file_flushes_whatever_least_pages_says(mapped: MappedFile) -> None:
    mapped.append(b"x" * (FILE_SIZE - OS_PAGE_SIZE))
    mapped.flush(0)
    mapped.append(b"y" * OS_PAGE_SIZE)
    assert mapped.is_full
    assert mapped.is_able_to_flush(100)
    assert mapped.flush(100) == FILE_SIZE


# ---------------------------------------------------------------- lifecycle


def test_reopen_existing_file_sees_its_bytes(tmp_path: Path) -> None:
    path = tmp_path / offset_to_file_name(4096)
    first = MappedFile(path, 4096, create=True)
    first.append(b"persisted")
    first.flush(0)
    first.close()
    second = MappedFile(path, 4096)
    try:
        assert second.file_from_offset == 4096
        second.set_positions(9)
        assert second.read(0, 9) == b"persisted"
        assert second.flushed_position == 9
    finally:
        second.close()


def test_close_is_idempotent_and_flush_after_close_is_harmless(mapped: MappedFile) -> None:
    mapped.append(b"x")
    mapped.close()
    mapped.close()
    assert mapped.closed
    assert mapped.flush(0) == 0


def test_destroy_removes_the_file(mapped: MappedFile) -> None:
    mapped.destroy()
    assert not mapped.path.exists()
    mapped.destroy()  # a second destroy is harmless


def resident_kib(path: Path) -> int:
    """Resident KiB of this process's mapping of ``path`` (from /proc/self/smaps)."""
    lines = Path("/proc/self/smaps").read_text().splitlines()
    for number, line in enumerate(lines):
        if line.endswith(str(path)):
            for field in lines[number + 1 :]:
                if field.startswith("Rss:"):
                    return int(field.split()[1])
    raise AssertionError(f"{path} is not mapped")


def test_prefault_maps_pages_in_without_changing_them(tmp_path: Path) -> None:
    mapped = MappedFile(tmp_path / offset_to_file_name(0), 128 * OS_PAGE_SIZE, create=True)
    mapped.append(b"head")
    before = resident_kib(mapped.path)
    assert mapped.prefault(64 * OS_PAGE_SIZE)
    assert mapped.prefaulted_position == 64 * OS_PAGE_SIZE
    assert resident_kib(mapped.path) >= before + 60 * OS_PAGE_SIZE // 1024
    assert mapped.buffer[:4] == b"head" and mapped.buffer[4 : 64 * OS_PAGE_SIZE].count(0) == (
        64 * OS_PAGE_SIZE - 4
    )
    assert mapped.prefault(mapped.file_size * 2)  # capped at the file's end
    assert mapped.prefaulted_position == mapped.file_size
    mapped.close()
    assert mapped.prefault(mapped.file_size)  # a closed file: nothing to do


# ---------------------------------------------------------------- sparse files


def allocated_bytes(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_a_sparse_file_takes_disk_a_chunk_ahead_of_its_writes(tmp_path: Path) -> None:
    size = 4 * RESERVE_CHUNK
    mapped = MappedFile(tmp_path / offset_to_file_name(0), size, create=True, sparse=True)
    try:
        assert mapped.path.stat().st_size == size
        assert allocated_bytes(mapped.path) == 0
        assert mapped.append(b"unit")
        assert mapped.reserved_position == OS_PAGE_SIZE, "a page first"
        assert 0 < allocated_bytes(mapped.path) <= OS_PAGE_SIZE
        reserved = [mapped.reserved_position]
        while mapped.append(b"u" * 1000):
            assert mapped.wrote_position <= mapped.reserved_position
            assert mapped.reserved_position - mapped.wrote_position <= RESERVE_CHUNK
            if mapped.reserved_position != reserved[-1]:
                reserved.append(mapped.reserved_position)
        assert reserved[:5] == [n * OS_PAGE_SIZE for n in (1, 2, 4, 8, 16)], "then doubling"
        assert reserved[-1] == size and mapped.buffer[:4] == b"unit"
        assert allocated_bytes(mapped.path) >= size - 1000
    finally:
        mapped.close()


def test_a_write_at_past_the_reserved_position_reserves_first(tmp_path: Path) -> None:
    mapped = MappedFile(
        tmp_path / offset_to_file_name(0), RESERVE_CHUNK * 4, create=True, sparse=True
    )
    try:
        mapped.write_at(RESERVE_CHUNK + 10, b"x")
        assert mapped.reserved_position >= RESERVE_CHUNK + 11
        assert allocated_bytes(mapped.path) >= RESERVE_CHUNK + 11
    finally:
        mapped.close()


def test_a_loaded_sparse_file_is_mapped_on_first_use(tmp_path: Path) -> None:
    path = tmp_path / offset_to_file_name(0)
    MappedFile(path, RESERVE_CHUNK, create=True, sparse=True).close()
    path.write_bytes(b"head" + bytes(RESERVE_CHUNK - 4))
    mapped = MappedFile(path, RESERVE_CHUNK, sparse=True)
    assert "buffer" not in vars(mapped)
    mapped.set_positions(4)
    assert mapped.read(0, 4) == b"head"
    assert "buffer" in vars(mapped)
    mapped.close()
    never_used = MappedFile(path, RESERVE_CHUNK, sparse=True)
    never_used.set_positions(4)
    never_used.close()
    with pytest.raises(ValueError, match="closed"):
        never_used.read(0, 1)


def test_a_reserved_file_takes_its_whole_size_on_creation(tmp_path: Path) -> None:
    mapped = MappedFile(tmp_path / offset_to_file_name(0), 4 * RESERVE_CHUNK, create=True)
    try:
        assert mapped.reserved_position == mapped.file_size
        assert allocated_bytes(mapped.path) >= mapped.file_size
    finally:
        mapped.close()


FULL_DISK_SCRIPT = textwrap.dedent(
    """
    import errno, sys
    from pathlib import Path
    from storage.consume_queue import ConsumeQueue
    from storage.mapped_file import MappedFile

    root = Path(sys.argv[1])
    mapped = MappedFile(root / "00000000000000000000", 1 << 20, create=True, sparse=True)
    written = 0
    try:
        while mapped.append(bytes(range(256)) * 16):
            written += 4096
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    assert 0 < written < 1 << 20 and mapped.wrote_position == written
    assert mapped.buffer[written - 4096 : written] == bytes(range(256)) * 16
    queue = ConsumeQueue(root / "consumequeue", "T", 0, 10_000)
    queue.load()
    try:
        queue.put(0, 100, 0, 0)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    assert queue.max_offset == 0
    mapped.destroy()  # space is back
    for n in range(5000):
        assert queue.put(n * 100, 100, 0, n)
    assert queue.max_offset == 5000
    print("refused", written)
    """
)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_refuses_a_sparse_write_with_enospc_not_sigbus(tmp_path: Path) -> None:
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)], check=True
    )
    try:
        child = subprocess.run(
            [sys.executable, "-c", FULL_DISK_SCRIPT, str(mount_point)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
    assert child.returncode == 0, (child.returncode, child.stderr)  # -7 would be SIGBUS
    assert child.stdout.split()[0] == "refused"

"""Planning and reading byte ranges of CommitLog files, without pyspark.

:func:`plan_ranges` runs once per read: it lists the CommitLog files of every store, skips
files (and ranges) that the store times rule out, and cuts larger files into ranges of about
``split_size`` bytes at record boundaries, walking each file from its start and each cut from
the one before. :func:`read_range` runs once per range, anywhere: it maps the file read-only,
walks the range's records and yields Arrow batches.

Store times in a CommitLog only grow (the server stamps them inside its append lock), which
is what time skipping relies on: every record of file ``i`` was stored no earlier than the
first record of file ``i`` and no later than the first record of file ``i + 1``.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spark_jobs.arrays import Bytes
from spark_jobs.records import (
    KEEP_ALL,
    RecordFilter,
    batches,
    walk_chain,
)
from storage.record.decode import RecordKind
from storage.record.layout import Buffer
from storage.store_reader import (
    StoreFile,
    commit_log_files,
    first_store_timestamp,
    store_timestamp_at,
)


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Records of one CommitLog file that start in ``[start, end)`` (positions in the file).

    ``end`` None means "to the end of the file's valid data at read time": the last range of
    a file, which is where a running server appends.
    """

    store_dir: str
    path: str
    file_start: int
    start: int
    end: int | None

    @property
    def commit_log_start(self) -> int:
        """The range's first CommitLog offset."""
        return self.file_start + self.start


@dataclass(frozen=True, slots=True)
class _TimedFile:
    file: StoreFile
    first_ms: int | None  # store time of its first record, None when it has none yet
    next_ms: int | None  # store time of the next file's first record, None when last


def _timed_files(store_dir: str) -> list[_TimedFile]:
    files = commit_log_files(Path(store_dir))
    firsts = [first_store_timestamp(f) for f in files]
    timed = []
    for index, file in enumerate(files):
        later = [t for t in firsts[index + 1 :] if t is not None]
        timed.append(_TimedFile(file, firsts[index], later[0] if later else None))
    return timed


def _outside(first_ms: int | None, next_ms: int | None, record_filter: RecordFilter) -> bool:
    """Whether no record stored in [first_ms, next_ms] can be inside the filter's window."""
    if first_ms is None:
        return False
    if record_filter.to_ms is not None and first_ms >= record_filter.to_ms:
        return True
    return (
        record_filter.from_ms is not None
        and next_ms is not None
        and next_ms < record_filter.from_ms
    )


def plan_ranges(
    store_dirs: Sequence[str], split_size: int, record_filter: RecordFilter = KEEP_ALL
) -> list[ByteRange]:
    """The byte ranges to read, in CommitLog order per store (stores in the given order)."""
    ranges: list[ByteRange] = []
    for store_dir in store_dirs:
        for timed in _timed_files(store_dir):
            if timed.first_ms is None:
                continue  # no complete first record: nothing to read yet
            if _outside(timed.first_ms, timed.next_ms, record_filter):
                continue
            ranges.extend(_file_ranges(store_dir, timed, split_size, record_filter))
    return ranges


def _file_ranges(
    store_dir: str, timed: _TimedFile, split_size: int, record_filter: RecordFilter
) -> list[ByteRange]:
    file = timed.file
    whole = ByteRange(store_dir, str(file.path), file.start_offset, 0, None)
    if file.size <= split_size:
        return [whole]
    try:
        with _mapped(file.path) as (buffer, _data):
            cuts = _cuts(buffer, file.size, split_size)
            times = [store_timestamp_at(buffer, cut, file.size) for cut in cuts]
    except FileNotFoundError:
        return []
    ranges = []
    for index, start in enumerate(cuts):
        end = cuts[index + 1] if index + 1 < len(cuts) else None
        upper = times[index + 1] if index + 1 < len(cuts) else timed.next_ms
        if _outside(times[index], upper, record_filter):
            continue
        ranges.append(ByteRange(store_dir, str(file.path), file.start_offset, start, end))
    return ranges


def _cuts(buffer: Buffer, size: int, split_size: int) -> list[int]:
    """Record boundaries near every multiple of ``split_size``, starting with 0.

    Each cut is found by walking from the previous one; the walk ends early at a BLANK, END
    or CORRUPT position (the rest of the file then belongs to the last range).
    """
    cuts = [0]
    target = split_size
    while target < size:
        chain = walk_chain(buffer, cuts[-1], end=target, limit=size)
        if chain.stop.kind is not RecordKind.MESSAGE or chain.stop.position >= size:
            break
        cuts.append(chain.stop.position)
        target = max(target + split_size, chain.stop.position + 1)
    return cuts


@contextmanager
def _mapped(path: str | Path) -> Iterator[tuple[Buffer, Bytes]]:
    """A file mapped read-only, with a uint8 view of it (empty for an empty file)."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            yield b"", np.empty(0, dtype=np.uint8)
            return
        view = mmap.mmap(handle.fileno(), size, access=mmap.ACCESS_READ)
        try:
            yield view, np.frombuffer(view, dtype=np.uint8)
        finally:
            try:
                view.close()
            except BufferError:
                pass  # a caller still holds the array; the map closes when it is collected


def read_range(
    byte_range: ByteRange,
    record_filter: RecordFilter = KEEP_ALL,
    batch_size: int = 16_384,
    check_crc: bool = False,
) -> Iterator[Any]:
    """Arrow record batches of the complete, valid records of one range.

    Stops at the end of the file's valid data (BLANK, zeros, a torn tail, corruption); a file
    deleted meanwhile yields nothing.
    """
    try:
        with _mapped(byte_range.path) as (buffer, data):
            chain = walk_chain(buffer, byte_range.start, byte_range.end, check_crc=check_crc)
            yield from batches(
                data,
                chain.positions,
                byte_range.file_start,
                byte_range.store_dir,
                record_filter,
                batch_size,
            )
            del data
    except FileNotFoundError:
        return

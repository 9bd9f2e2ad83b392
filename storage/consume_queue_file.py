"""ConsumeQueueFile: the units of one ConsumeQueue file read with ``pread``, not its mapping.

Recovery looks at every queue of the store, most of them idle. Reading their units through
the mappings would fault each touched page (and the kernel's fault-around neighbours) into
the broker's resident set: tens of KiB per queue, gigabytes at tens of thousands of queues.
Reads through the file descriptor leave the pages in the page cache only, and the search
for a file's end (:func:`count_valid_units`, also the read-only tools' rule) touches O(log n)
units of a file holding n, all within its first 2n units: a queue's restart cost follows its
data, not its file size.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from storage.record.layout import CQ_UNIT_SIZE, CQ_UNIT_STRUCT, PRE_BLANK_SIZE

Unit = tuple[int, int, int]
"""(commit log offset, size, tags code)"""

READ_BLOCK: Final = 204 * CQ_UNIT_SIZE
"""Bytes read at a time when units are walked in order (a little under a page)."""

_unpack_unit = CQ_UNIT_STRUCT.unpack_from


def is_valid_unit(offset: int, size: int) -> bool:
    """RocketMQ's recovery rule: a written unit has offset >= 0 and size > 0 (pre-blank
    fillers pass); the queue's valid data ends at the first unit that does not."""
    return offset >= 0 and size > 0


def count_valid_units(unit_at: Callable[[int], Unit], count: int) -> int:
    """How many leading units of a file of ``count`` units are valid.

    Units are written in order, so the valid ones form a prefix. An exponential search from
    the start, then a binary one: O(log n) units read for n valid ones, none beyond unit 2n,
    so an idle queue's file costs two reads whatever its size.
    """
    if count == 0 or not is_valid_unit(*unit_at(0)[:2]):
        return 0
    low = 1  # units [0, low) are valid
    while True:
        probe = min(2 * low, count)
        if not is_valid_unit(*unit_at(probe - 1)[:2]):
            high = probe - 1  # unit ``high`` is invalid
            break
        low = probe
        if probe == count:
            return count
    while low < high:
        middle = (low + high) // 2
        if is_valid_unit(*unit_at(middle)[:2]):
            low = middle + 1
        else:
            high = middle
    return low


class ConsumeQueueFile:
    """An open ConsumeQueue file of ``file_size`` bytes; use as a context manager."""

    def __init__(self, path: Path, file_size: int) -> None:
        self.path = path
        self.units_per_file = file_size // CQ_UNIT_SIZE
        self._fd = os.open(path, os.O_RDONLY)

    def __enter__(self) -> ConsumeQueueFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        os.close(self._fd)

    def unit_at(self, index: int) -> Unit:
        """The unit at ``index`` (all zeros past the end of the file)."""
        data = os.pread(self._fd, CQ_UNIT_SIZE, index * CQ_UNIT_SIZE)
        if len(data) < CQ_UNIT_SIZE:
            return 0, 0, 0
        offset, size, code = _unpack_unit(data)
        return int(offset), int(size), int(code)

    def count_valid_units(self) -> int:
        """How many leading units are valid (:func:`count_valid_units`)."""
        return count_valid_units(self.unit_at, self.units_per_file)

    def units(self, start: int, end: int) -> Iterator[Unit]:
        """The units in bytes ``[start, end)``, in order, read a block at a time."""
        position = start
        while position + CQ_UNIT_SIZE <= end:
            length = min(READ_BLOCK, (end - position) // CQ_UNIT_SIZE * CQ_UNIT_SIZE)
            block = os.pread(self._fd, length, position)
            if len(block) < CQ_UNIT_SIZE:
                return
            for offset, size, code in CQ_UNIT_STRUCT.iter_unpack(
                block[: len(block) // CQ_UNIT_SIZE * CQ_UNIT_SIZE]
            ):
                yield int(offset), int(size), int(code)
            position += len(block)

    def last_physical_end(self, end: int) -> int | None:
        """End offset in the CommitLog of the last real (not pre-blank) unit before byte
        ``end``; None when there is none. Walks back a block at a time over pre-blanks."""
        stop = end
        while stop > 0:
            start = max(0, stop - READ_BLOCK)
            block = os.pread(self._fd, stop - start, start)
            for position in range(len(block) - CQ_UNIT_SIZE, -1, -CQ_UNIT_SIZE):
                offset, size, _ = _unpack_unit(block, position)
                if size != PRE_BLANK_SIZE:
                    return int(offset + size)
            stop = start
        return None

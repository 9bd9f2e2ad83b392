"""TimerWheel: the slots of the timing wheel, one file (RocketMQ's ``TimerWheel``).

``2 x slots_total`` slots of 32 bytes (36.9 MiB with the default 7 days of 1 s slots);
slot index = ``(timeMs / precisionMs) mod (2 x slots_total)``. Slot layout, big-endian::

    timeMs/precision  long  8   which time the slot holds now
    firstPos          long  8   first unit in the timer log, -1 when empty
    lastPos           long  8   last unit (the head of the backward list)
    num               int   4   how many units
    magic             int   4   unused

A slot holding another time than the one asked for is empty. The wheel is worked on in a
heap copy; :meth:`snapshot` takes the pages that changed and :meth:`write_snapshot` writes
them to the file and forces it — the owner takes the snapshot right after the units it
refers to were appended and writes it only after the timer log is on disk, so the wheel on
disk never points past the durable end of the timer log.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Final, NamedTuple

SLOT_SIZE: Final = 32
_PAGE: Final = mmap.PAGESIZE
_SLOT: Final = struct.Struct(">qqqii")


class Slot(NamedTuple):
    time_ms: int
    first_pos: int
    last_pos: int
    num: int

    @property
    def empty(self) -> bool:
        return self.last_pos < 0


class WheelSnapshot(NamedTuple):
    """Changed pages of the wheel: (byte offset, bytes) each."""

    pages: list[tuple[int, bytes]]


class TimerWheel:
    """The wheel's heap copy and its file."""

    def __init__(self, path: Path, slots_total: int, precision_ms: int) -> None:
        self.path = path
        self.slots = 2 * slots_total
        self.precision_ms = precision_ms
        self.size = self.slots * SLOT_SIZE
        path.parent.mkdir(parents=True, exist_ok=True)
        # File reads and writes, not a mapping: the slots live in the heap copy, and a full or
        # failing disk answers an OSError here instead of a SIGBUS on a mapped page.
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(self._fd).st_size != self.size:
                os.ftruncate(self._fd, self.size)
            self._heap = bytearray(self.size)
            view = memoryview(self._heap)
            done = 0
            while done < self.size:
                read = os.preadv(self._fd, [view[done:]], done)
                if read <= 0:
                    break
                done += read
        except BaseException:
            os.close(self._fd)
            raise
        self._dirty = bytearray((self.size + _PAGE - 1) // _PAGE)

    def _position(self, time_ms: int) -> int:
        return (time_ms // self.precision_ms) % self.slots * SLOT_SIZE

    def get_slot(self, time_ms: int) -> Slot:
        """The slot of ``time_ms`` (empty when it holds another time)."""
        stamp, first, last, num, _ = _SLOT.unpack_from(self._heap, self._position(time_ms))
        tick = time_ms // self.precision_ms
        if stamp != tick or (first == 0 and last == 0 and num == 0):
            return Slot(tick * self.precision_ms, -1, -1, 0)
        return Slot(tick * self.precision_ms, first, last, num)

    def put_slot(self, time_ms: int, first_pos: int, last_pos: int, num: int) -> None:
        position = self._position(time_ms)
        _SLOT.pack_into(
            self._heap, position, time_ms // self.precision_ms, first_pos, last_pos, num, 0
        )
        self._dirty[position // _PAGE] = 1

    def revise_slot(self, time_ms: int, unit_pos: int, count: int) -> bool:
        """Apply a unit found by recovery unless the slot has it already (units of one slot
        are appended in order, so a slot whose ``last_pos`` is at or past it has it)."""
        slot = self.get_slot(time_ms)
        if not slot.empty and slot.last_pos >= unit_pos:
            return False
        first = unit_pos if slot.empty else slot.first_pos
        self.put_slot(time_ms, first, unit_pos, max(0, slot.num + count))
        return True

    def occupied(self, start_ms: int, count: int) -> list[Slot]:
        """The non-empty slots among the ``count`` from ``start_ms`` on, in time order (one
        pass over the heap copy, at most one turn of the wheel)."""
        first_tick = start_ms // self.precision_ms
        count = max(0, min(count, self.slots))
        found: list[Slot] = []
        for tick in range(first_tick, first_tick + count):
            position = tick % self.slots * SLOT_SIZE
            if self._heap[position + 7] != tick & 0xFF:  # the stamp's low byte: a quick miss
                continue
            stamp, first, last, num, _ = _SLOT.unpack_from(self._heap, position)
            if stamp == tick and (first or last or num):
                found.append(Slot(tick * self.precision_ms, first, last, num))
        return found

    def snapshot(self) -> WheelSnapshot:
        """The pages changed since the last snapshot (call on the owner thread)."""
        dirty = self._dirty
        heap = self._heap
        pages = [
            (index * _PAGE, bytes(heap[index * _PAGE : (index + 1) * _PAGE]))
            for index in _set_indexes(dirty)
        ]
        self._dirty = bytearray(len(dirty))
        return WheelSnapshot(pages)

    def write_snapshot(self, snapshot: WheelSnapshot) -> None:
        """Write a snapshot's pages into the file and force them (any thread)."""
        if not snapshot.pages:
            return
        for offset, data in snapshot.pages:
            written = 0
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], offset + written)
        os.fdatasync(self._fd)

    def reset(self) -> None:
        """Empty every slot."""
        self._heap = bytearray(self.size)
        self._dirty = bytearray(b"\x01" * len(self._dirty))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _set_indexes(flags: bytearray) -> list[int]:
    """Indexes of the bytes that are 1."""
    indexes = []
    position = flags.find(1)
    while position >= 0:
        indexes.append(position)
        position = flags.find(1, position + 1)
    return indexes

"""TimerLog: the timer's append-only log of fixed 52-byte units (RocketMQ's ``TimerLog``).

One unit per message placed in a slot; the units of one slot form a backward linked list
through ``prev_pos``, starting at the slot's ``last_pos``. Files are a
:class:`~storage.mapped_file_queue.MappedFileQueue` (100 MiB by default); a unit never
straddles two files: the rest of a file too short for one is a blank (``size`` = the rest,
``magic`` = :data:`BLANK_MAGIC_CODE`, when at least 16 bytes are left; zeros otherwise).

Unit layout, big-endian::

    size            int   4   always 52
    prevPos         long  8   previous unit of the same slot, -1 for the first
    magic           int   4   MAGIC_DEFAULT | MAGIC_ROLL | MAGIC_DELETE
    currWriteTimeMs long  8   the wheel's write time when the unit was written
    delayTime       int   4   fire time - currWriteTimeMs
    offsetPy        long  8   CommitLog offset of the timer-topic record
    sizePy          int   4   its size
    hashTopic       int   4   RocketMQ: hash of the real topic; spoolmq writes 0
    queueOffset     long  8   RocketMQ: reserved; spoolmq: the record's offset in the timer
                              topic's ConsumeQueue (recovery resumes after the last one)
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final, NamedTuple

from storage.mapped_file_queue import MappedFileQueue
from storage.record.layout import BLANK_MAGIC_CODE

UNIT_SIZE: Final = 52
MIN_BLANK_LEN: Final = 16
MAGIC_DEFAULT: Final = 1
MAGIC_ROLL: Final = 2
MAGIC_DELETE: Final = 4
_MAGIC_BITS: Final = MAGIC_DEFAULT | MAGIC_ROLL | MAGIC_DELETE

_UNIT: Final = struct.Struct(
    ">i"  # size
    "q"  # prevPos
    "i"  # magic
    "q"  # currWriteTimeMs
    "i"  # delayTime
    "q"  # offsetPy
    "i"  # sizePy
    "i"  # hashTopic
    "q"  # queueOffset (reserved in RocketMQ)
)
_BLANK: Final = struct.Struct(">iqi")
assert _UNIT.size == UNIT_SIZE


class TimerUnit(NamedTuple):
    """One unit, and where it lies."""

    pos: int
    prev_pos: int
    magic: int
    write_time_ms: int
    delay_ms: int
    offset_py: int
    size_py: int
    queue_offset: int

    @property
    def fire_ms(self) -> int:
        return self.write_time_ms + self.delay_ms


def unit_is_sane(data: bytes | memoryview) -> bool:
    """Whether 52 bytes look like a unit: the right size and a known magic."""
    size, _, magic = _BLANK.unpack_from(data, 0)
    return bool(size == UNIT_SIZE and magic & _MAGIC_BITS == magic and magic != 0)


class TimerLog:
    """The timer log's files; appends on the owner thread, flushes on any."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.queue = MappedFileQueue(directory, file_size)

    def load(self) -> None:
        self.queue.load()

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    @property
    def min_offset(self) -> int:
        return max(self.queue.min_offset, 0)

    def append(
        self,
        prev_pos: int,
        magic: int,
        write_time_ms: int,
        delay_ms: int,
        offset_py: int,
        size_py: int,
        queue_offset: int,
    ) -> int:
        """Append a unit; its position."""
        mapped = self.queue.get_last_mapped_file()
        assert mapped is not None
        if mapped.remaining < UNIT_SIZE:
            self._fill_blank(mapped.buffer, mapped.wrote_position, mapped.remaining)
            mapped.wrote_position = mapped.file_size
            mapped = self.queue.get_last_mapped_file()
            assert mapped is not None
        position = mapped.wrote_position
        _UNIT.pack_into(
            mapped.buffer,
            position,
            UNIT_SIZE,
            prev_pos,
            magic,
            write_time_ms,
            delay_ms,
            offset_py,
            size_py,
            0,
            queue_offset,
        )
        mapped.wrote_position = position + UNIT_SIZE
        return mapped.file_from_offset + position

    @staticmethod
    def _fill_blank(buffer: bytearray | memoryview | object, position: int, remaining: int) -> None:
        if remaining >= MIN_BLANK_LEN:
            _BLANK.pack_into(buffer, position, remaining, -1, BLANK_MAGIC_CODE)  # type: ignore[arg-type]

    def read(self, pos: int) -> TimerUnit | None:
        """The unit at ``pos``, or None when there is none there."""
        mapped = self.queue.find_by_offset(pos)
        if mapped is None:
            return None
        data = mapped.read(pos - mapped.file_from_offset, UNIT_SIZE)
        if data is None or not unit_is_sane(data):
            return None
        return _unit_at(pos, data)

    def scan(self, start: int) -> Iterator[TimerUnit]:
        """Units from ``start`` (a unit boundary) up to the first that is not sane; blanks at
        file ends are stepped over."""
        queue = self.queue
        pos = start
        while True:
            mapped = queue.find_by_offset(pos)
            if mapped is None:
                return
            position = pos - mapped.file_from_offset
            buffer = mapped.buffer
            if mapped.file_size - position < UNIT_SIZE or _is_blank(buffer, position):
                pos = mapped.file_end_offset
                continue
            data = buffer[position : position + UNIT_SIZE]
            if not unit_is_sane(data):
                return
            yield _unit_at(pos, data)
            pos += UNIT_SIZE

    def truncate(self, end: int) -> None:
        """Drop everything from ``end`` (a unit boundary or a file start) on."""
        queue = self.queue
        if not queue.files:
            return
        if end <= queue.files[0].file_from_offset:
            queue.destroy()
            return
        queue.truncate_dirty_files(end)
        last = queue.last_file()
        if last is not None and last.file_end_offset > end >= last.file_from_offset:
            buffer = last.buffer
            position = end - last.file_from_offset
            buffer[position : last.file_size] = bytes(last.file_size - position)

    def flush(self) -> None:
        self.queue.flush_all()

    def delete_files_written_before(self, time_ms: int) -> int:
        """Delete leading files (never the last) whose last unit was written before
        ``time_ms``; how many went. Units are appended in time order, so a file's last unit
        is its latest."""
        verdicts = []
        for mapped in self.queue.files[:-1]:
            last = (mapped.file_size // UNIT_SIZE - 1) * UNIT_SIZE
            data = mapped.buffer[last : last + UNIT_SIZE]
            verdicts.append(unit_is_sane(data) and _unit_at(0, data).write_time_ms < time_ms)
        return self.queue.delete_files_below(verdicts)

    def close(self) -> None:
        self.queue.close()


def _is_blank(buffer: object, position: int) -> bool:
    _, _, magic = _BLANK.unpack_from(buffer, position)  # type: ignore[arg-type]
    return bool(magic == BLANK_MAGIC_CODE)


def _unit_at(pos: int, data: bytes | memoryview) -> TimerUnit:
    _, prev, magic, write_time, delay, offset_py, size_py, _, queue_offset = _UNIT.unpack_from(
        data, 0
    )
    return TimerUnit(pos, prev, magic, write_time, delay, offset_py, size_py, queue_offset)

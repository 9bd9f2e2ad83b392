"""ConsumeQueue: the 20-byte-unit index of one (topic, queue id) into the CommitLog.

Logical offset ``n`` is unit ``n``: byte ``n*20`` of the queue, in file
``floor(n*20 / file_size)``. The max offset is exclusive (the next unit to write).

The unit rules are written once, as functions, for the store and for the read-only
readers (:mod:`storage.store_reader`, the Spark jobs): a unit is *valid* (written) when its
offset is >= 0 and its size > 0, and the valid units of a file form a prefix
(:func:`~storage.consume_queue_file.count_valid_units`), so the max offset is the number
of valid units up to the first invalid one; a unit is *readable* when it is no pre-blank
filler and still points into the CommitLog (:func:`is_readable_unit`), and the min offset is
the first readable unit (:func:`readable_start`).

A search by time follows RocketMQ 4.x (the closest message, :meth:`ConsumeQueue.offset_by_time`)
or RocketMQ 5's lower boundary (the first message at or after the time,
:meth:`ConsumeQueue.first_offset_stored_at_or_after`). Files are sparse, as RocketMQ's: a
queue takes disk as it fills (a chunk reserved ahead of its writes, see
:mod:`storage.mapped_file`), not a whole file's worth on creation.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from storage.consume_queue_file import ConsumeQueueFile, Unit, is_valid_unit
from storage.mapped_file import MappedFile
from storage.mapped_file_queue import MappedFileQueue
from storage.record.layout import CQ_UNIT_SIZE, CQ_UNIT_STRUCT, PRE_BLANK_SIZE

PRE_BLANK_UNIT: Final = CQ_UNIT_STRUCT.pack(0, PRE_BLANK_SIZE, 0)
_pack_unit = CQ_UNIT_STRUCT.pack
_pack_unit_into = CQ_UNIT_STRUCT.pack_into
_unpack_unit = CQ_UNIT_STRUCT.unpack_from

__all__ = [
    "ConsumeQueue",
    "Unit",
    "is_readable_unit",
    "is_valid_unit",
    "readable_start",
]


def is_readable_unit(offset: int, size: int, min_physical_offset: int) -> bool:
    """Whether a valid unit's message can be read: not a pre-blank filler, and pointing at
    or past the CommitLog's min offset (``min_physical_offset``)."""
    return size != PRE_BLANK_SIZE and offset >= min_physical_offset


def readable_start(units: Iterable[Unit], min_physical_offset: int) -> tuple[int, bool]:
    """How many units of a run come before its first readable one, and whether one was
    found (False when the run ends, or reaches an invalid unit, first)."""
    skipped = 0
    for offset, size, _code in units:
        if not is_valid_unit(offset, size):
            return skipped, False
        if is_readable_unit(offset, size, min_physical_offset):
            return skipped, True
        skipped += 1
    return skipped, False


class ConsumeQueue:
    """One queue's index: put units at logical offsets, read them back, recover, truncate."""

    def __init__(
        self,
        root: Path,
        topic: str,
        queue_id: int,
        units_per_file: int,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.file_size = units_per_file * CQ_UNIT_SIZE
        self.queue = MappedFileQueue(root / topic / str(queue_id), self.file_size, sparse=True)
        self.max_physic_offset = -1
        self.min_logic_offset = 0  # bytes
        self.last_store_timestamp = 0

    def __repr__(self) -> str:
        return f"ConsumeQueue({self.topic}, {self.queue_id})"

    # ------------------------------------------------------------------ offsets

    @property
    def min_offset(self) -> int:
        return self.min_logic_offset // CQ_UNIT_SIZE

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset // CQ_UNIT_SIZE

    @property
    def message_total(self) -> int:
        return self.max_offset - self.min_offset

    def roll_next_file(self, index: int) -> int:
        return index + self.units_per_file - index % self.units_per_file

    # ------------------------------------------------------------------ write

    def put(self, physical_offset: int, size: int, tags_code: int, queue_offset: int) -> bool:
        """Write the unit for ``queue_offset``; already-present units are skipped (idempotent).

        Returns True when the unit is in place (written now or before).
        """
        if physical_offset + size <= self.max_physic_offset:
            return True
        expect = queue_offset * CQ_UNIT_SIZE
        files = self.queue.files
        if files:  # the common case: the next unit of a started, not full, last file
            last = files[-1]
            position = last.wrote_position
            if 0 < position < self.file_size and last.file_from_offset + position == expect:
                if position + CQ_UNIT_SIZE > last.reserved_position:
                    last.reserve(position + CQ_UNIT_SIZE)
                _pack_unit_into(last.buffer, position, physical_offset, size, tags_code)
                last.wrote_position = position + CQ_UNIT_SIZE
                self.max_physic_offset = physical_offset + size
                return True
        mapped = self.queue.get_last_mapped_file(expect)
        if mapped is None:
            return False
        if mapped.first_create_in_queue and queue_offset != 0 and mapped.wrote_position == 0:
            self._pre_blank_fill(mapped, expect)
        current = mapped.file_from_offset + mapped.wrote_position
        if expect < current:
            return True
        if expect > current:
            # A hole: RocketMQ logs "[BUG] logic queue order maybe wrong" and appends anyway.
            # Filling it keeps unit positions equal to logical offsets.
            self._fill_hole(mapped, expect)
            mapped = self.queue.get_last_mapped_file(expect)
            if mapped is None:
                return False
        mapped.append(_pack_unit(physical_offset, size, tags_code))
        self.max_physic_offset = physical_offset + size
        return True

    def put_units(self, queue_offset: int, units: bytes) -> bool:
        """Write consecutive packed units from ``queue_offset`` (a batch): one copy when they
        all fit the started last file and are new, else unit by unit through :meth:`put`."""
        first_physical, first_size, _ = _unpack_unit(units)
        files = self.queue.files
        if files and first_physical + first_size > self.max_physic_offset:
            last = files[-1]
            position = last.wrote_position
            end = position + len(units)
            if (
                position > 0
                and end <= self.file_size
                and last.file_from_offset + position == queue_offset * CQ_UNIT_SIZE
            ):
                if end > last.reserved_position:
                    last.reserve(end)
                last.buffer[position:end] = units
                last.wrote_position = end
                physical, size, _ = _unpack_unit(units, len(units) - CQ_UNIT_SIZE)
                self.max_physic_offset = physical + size
                return True
        for index, (physical, size, code) in enumerate(CQ_UNIT_STRUCT.iter_unpack(units)):
            if not self.put(physical, size, code, queue_offset + index):
                return False
        return True

    def _pre_blank_fill(self, mapped: MappedFile, expect: int) -> None:
        """First file of a queue that starts at a non-zero offset: pad with blank units."""
        self.min_logic_offset = expect
        fill = expect % self.file_size
        mapped.write_at(0, PRE_BLANK_UNIT * (fill // CQ_UNIT_SIZE))
        mapped.set_positions(fill)

    def _fill_hole(self, mapped: MappedFile, expect: int) -> None:
        while True:
            current = mapped.file_from_offset + mapped.wrote_position
            if current >= expect:
                return
            gap = min(expect - current, mapped.remaining)
            mapped.append(PRE_BLANK_UNIT * (gap // CQ_UNIT_SIZE))
            if mapped.is_full:
                nxt = self.queue.get_last_mapped_file(expect)
                if nxt is None:
                    return
                mapped = nxt

    # ------------------------------------------------------------------ read

    def get_units(self, start_index: int, max_bytes: int | None = None) -> tuple[bytes, int] | None:
        """Raw units from ``start_index`` to the end of readable data in *that file only*.

        Returns (bytes, start_index) or None when the index is below the min offset or not
        readable.
        """
        offset = start_index * CQ_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mapped = self.queue.find_by_offset(offset)
        if mapped is None:
            return None
        data = mapped.select(offset % self.file_size, max_bytes)
        if data is None:
            return None
        return data, start_index

    def get_unit(self, index: int) -> Unit | None:
        """The unit at logical offset ``index``, or None."""
        offset = index * CQ_UNIT_SIZE
        if offset < self.min_logic_offset:
            return None
        mapped = self.queue.find_by_offset(offset)
        if mapped is None:
            return None
        data = mapped.read(offset % self.file_size, CQ_UNIT_SIZE)
        if data is None:
            return None
        physical, size, code = _unpack_unit(data)
        return int(physical), int(size), int(code)

    def offset_by_time(
        self, timestamp_ms: int, store_time_of: Callable[[int, int], int], min_physic_offset: int
    ) -> int:
        """RocketMQ's ``getOffsetInQueueByTime``: the message stored closest to ``timestamp_ms``.

        ``store_time_of(physical_offset, size)`` reads a store time from the CommitLog (-1
        when the record is gone). The answer is, in this order:

        * a message stored exactly then (the first of several with that time);
        * every message earlier: the last one (max offset - 1);
        * every message later: the first one (the min offset);
        * otherwise the closer of the two neighbours; a tie goes to the earlier one
          (RocketMQ compares ``|t - left| > |t - right|``).

        Units pointing below ``min_physic_offset``, pre-blank fillers and records gone from
        the CommitLog count as "too early" and are never answered. Unlike RocketMQ, which
        picks one file by its mtime and searches only that file, the search spans every
        file of the queue (mtimes change when a store is copied). An empty queue answers
        its max offset.
        """
        first_later, later_time = self._first_stored_at_or_after(
            timestamp_ms, store_time_of, min_physic_offset
        )
        if later_time == timestamp_ms:
            return first_later
        earlier = first_later - 1
        earlier_time = self.store_time_at(earlier, store_time_of, min_physic_offset)
        if earlier_time < 0:  # nothing readable before: every message is later (or none)
            return first_later
        if later_time < 0:  # every message is earlier: the last one
            return earlier
        return first_later if timestamp_ms - earlier_time > later_time - timestamp_ms else earlier

    def first_offset_stored_at_or_after(
        self, timestamp_ms: int, store_time_of: Callable[[int, int], int], min_physic_offset: int
    ) -> int:
        """The first message stored at or after ``timestamp_ms``; the max offset when none is.

        RocketMQ 5's ``BoundaryType.LOWER`` search: what a consumer starting "from this
        time" wants, never an earlier message.
        """
        return self._first_stored_at_or_after(timestamp_ms, store_time_of, min_physic_offset)[0]

    def _first_stored_at_or_after(
        self, timestamp_ms: int, store_time_of: Callable[[int, int], int], min_physic_offset: int
    ) -> tuple[int, int]:
        """(offset, store time) of the first readable unit stored at or after the time;
        (max offset, -1) when there is none. Store times never go down along a queue."""
        low, high = self.min_offset, self.max_offset  # the answer is in [low, high]
        found_time = -1
        while low < high:
            middle = (low + high) // 2
            stored = self.store_time_at(middle, store_time_of, min_physic_offset)
            if stored < timestamp_ms:  # "too early" units (stored < 0) included
                low = middle + 1
            else:
                high = middle
                found_time = stored
        return low, found_time

    def store_time_at(
        self, index: int, store_time_of: Callable[[int, int], int], min_physic_offset: int
    ) -> int:
        """Store time of the message at ``index``; -1 when it is not readable (no unit, a
        pre-blank filler, a record gone from the CommitLog)."""
        if index < self.min_offset:
            return -1
        unit = self.get_unit(index)
        if unit is None or not is_readable_unit(unit[0], unit[1], min_physic_offset):
            return -1
        return store_time_of(unit[0], unit[1])

    # ------------------------------------------------------------------ recovery

    def load(self) -> None:
        self.queue.load()

    def recover(self) -> None:
        """Find the end of the last three files, up to the first invalid unit; cut the
        queue there. The files are read with ``pread`` (:mod:`storage.consume_queue_file`):
        an idle queue's pages stay out of the broker's memory."""
        files = self.queue.files
        if not files:
            return
        index = max(0, len(files) - 3)
        process_offset = files[index].file_from_offset
        max_physic = -1
        for mapped in files[index:]:
            with ConsumeQueueFile(mapped.path, self.file_size) as file:
                valid = file.count_valid_units() * CQ_UNIT_SIZE
                last = file.last_physical_end(valid)
            process_offset = mapped.file_from_offset + valid
            if last is not None:
                max_physic = last
            if valid < self.file_size:
                break
        self.max_physic_offset = max_physic
        self.queue.flushed_where = process_offset
        self.queue.truncate_dirty_files(process_offset)

    def _last_physical_end(self, buffer: mmap.mmap, end: int) -> int | None:
        """End offset of the last real (not pre-blank) unit before byte ``end``."""
        position = end - CQ_UNIT_SIZE
        while position >= 0:
            offset, size, _ = _unpack_unit(buffer, position)
            if size != PRE_BLANK_SIZE:
                return int(offset + size)
            position -= CQ_UNIT_SIZE
        return None

    def truncate_dirty(self, physical_offset: int) -> None:
        """Drop every unit pointing at or beyond ``physical_offset`` (CommitLog's valid end).

        A queue whose last message ends at or below it has nothing to drop, and is not
        read (recovery calls this for every queue)."""
        if 0 <= self.max_physic_offset <= physical_offset:
            return
        while True:
            mapped = self.queue.last_file()
            if mapped is None:
                self.max_physic_offset = -1
                return
            keep = self._units_below(mapped, physical_offset)
            if keep == 0 and mapped.read_position > 0 and not self._starts_with_pre_blank(mapped):
                self.queue.delete_last_file()
                continue
            mapped.set_positions(keep)
            self.queue.flushed_where = min(self.queue.flushed_where, mapped.file_from_offset + keep)
            last = self._last_physical_end(mapped.buffer, keep)
            if last is not None:
                self.max_physic_offset = last
            elif len(self.queue.files) == 1:
                self.max_physic_offset = -1
            return

    def _units_below(self, mapped: MappedFile, physical_offset: int) -> int:
        """Bytes of the leading units (pre-blank or pointing below ``physical_offset``)."""
        buffer = mapped.buffer
        low, high = 0, mapped.read_position // CQ_UNIT_SIZE
        while low < high:
            middle = (low + high) // 2
            offset, size, _ = _unpack_unit(buffer, middle * CQ_UNIT_SIZE)
            if size == PRE_BLANK_SIZE or (size > 0 and offset < physical_offset):
                low = middle + 1
            else:
                high = middle
        return low * CQ_UNIT_SIZE

    def _starts_with_pre_blank(self, mapped: MappedFile) -> bool:
        return bool(mapped.read_position) and _unpack_unit(mapped.buffer, 0)[1] == PRE_BLANK_SIZE

    def correct_min_offset(self, min_physic_offset: int) -> None:
        """Point the min offset at the first unit whose message is still in the CommitLog
        (read with ``pread``, as recovery: it runs for every queue on open)."""
        first = self.queue.first_file()
        if first is None:
            return
        position = max(0, self.min_logic_offset - first.file_from_offset)
        with ConsumeQueueFile(first.path, self.file_size) as file:
            units = file.units(position, first.read_position)
            skipped, found = readable_start(units, min_physic_offset)
        if found:
            self.min_logic_offset = first.file_from_offset + position + skipped * CQ_UNIT_SIZE
        elif first.read_position == self.file_size and len(self.queue.files) == 1:
            self.min_logic_offset = first.file_end_offset
        elif len(self.queue.files) == 1:
            self.min_logic_offset = first.file_from_offset + first.read_position

    def delete_expired_files(self, min_physic_offset: int) -> int:
        """Delete leading files whose last unit points below the CommitLog's min offset."""
        verdicts = []
        for mapped in self.queue.files[:-1]:
            last = mapped.read(mapped.read_position - CQ_UNIT_SIZE, CQ_UNIT_SIZE)
            if last is None:
                verdicts.append(False)
                continue
            offset, size, _ = _unpack_unit(last)
            verdicts.append(size != PRE_BLANK_SIZE and offset + size <= min_physic_offset)
        deleted = self.queue.delete_files_below(verdicts)
        first = self.queue.first_file()
        if first is not None and self.min_logic_offset < first.file_from_offset:
            self.min_logic_offset = first.file_from_offset
        return deleted

    def flush(self, least_pages: int) -> bool:
        return self.queue.flush(least_pages)

    def close(self) -> None:
        self.queue.close()

    def destroy(self) -> None:
        self.queue.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0

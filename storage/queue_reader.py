"""Reading one ConsumeQueue by queue offset, with RocketMQ's GetMessageStatus rules
(reference §10.3).

The offset alone decides most statuses (empty queue, too small, overflow); otherwise the
units from the offset to the end of their ConsumeQueue file are read from the CommitLog's
files (:meth:`QueueReader.read_units`), capped like RocketMQ's ``isTheBatchFull``.
``next_begin_offset`` counts every unit examined, filtered-out ones included. Records come
decoded, or as views (what a consumer is shown of each, read straight from the mapped file
in the same pass: :func:`~storage.record.fields.message_view`).

A range read (:meth:`QueueReader.read_records`) is the scan's form of the same read: the
records as stored, one after another, up to a byte budget rather than the pull caps, across
ConsumeQueue files, with the same statuses and filters.

Where the offset is wrong for the queue, a master moves the consumer (``next_begin_offset``
is where to go on); a slave leaves it where it asked (:func:`next_offset_correction`).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from storage.commit_log import CommitLog
from storage.consume_queue import ConsumeQueue
from storage.record.decode import decode_record, stored_properties
from storage.record.fields import QueueTopic, message_view, queue_topic
from storage.record.java_hash import to_int32
from storage.record.layout import CQ_UNIT_SIZE, CQ_UNIT_STRUCT, PRE_BLANK_SIZE
from storage.record.message import GetMessageStatus
from storage.store_types import GetMessageResult, StoreConfig

T = TypeVar("T")
PropertyTest = Callable[[Mapping[str, str]], bool]
"""A property filter's test of a record's properties (a SQL92 filter's ``matches``)."""

_UNITS_WINDOW: Final = 16_000
"""Bytes of ConsumeQueue units one read examines at most (800 units), however many it
skips."""
_RANGE_WINDOW: Final = 64_000
"""Bytes of ConsumeQueue units a range read takes from its ConsumeQueue file at a time
(3,200 units); it goes on until its byte budget is spent."""


@dataclass(slots=True)  # not frozen: one per pull, cheaper to build (see StoredMessage)
class TransferLimits:
    """The caps of one pull batch (RocketMQ's ``isTheBatchFull``); the first message always
    goes out. ``disk_threshold``: units below this CommitLog offset count as "in disk"."""

    max_messages: int
    memory_bytes: int
    memory_count: int
    disk_bytes: int
    disk_count: int
    disk_threshold: int


@dataclass(slots=True)  # not frozen: one per pull, cheaper to build (see StoredMessage)
class UnitsRead(Generic[T]):
    """What ``read_units`` found: the records (decoded or views), how many units it examined
    (filtered-out ones count), and whether a unit pointed at a record that is gone."""

    found: list[T]
    scanned: int
    removed: bool


@dataclass(frozen=True, slots=True)
class RecordRange:
    """What a range read found: the status (as a pull's), where the next read starts, the
    queue's min and max offsets, and the records as the CommitLog stores them, one after
    another (``count`` of them)."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: bytes = b""
    count: int = 0


@dataclass(slots=True)
class _Run:
    """CommitLog bytes [start, end) holding ``count`` records one after another."""

    start: int = 0
    end: int = 0
    count: int = 0

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(slots=True)
class _RangeCopy:
    """The records a range read copied so far, and what it examined."""

    out: bytearray
    budget: int
    count: int = 0
    scanned: int = 0
    removed: bool = False
    full: bool = False

    @property
    def taken(self) -> int:
        return len(self.out)

    def take(self, run: _Run, buffer: mmap.mmap | bytes, file_start: int) -> _Run:
        """Copy ``run`` out of ``buffer`` (a CommitLog file from ``file_start``); a new,
        empty run to go on with."""
        if run.count:
            try:
                self.out += buffer[run.start - file_start : run.end - file_start]
                self.count += run.count
            except ValueError:  # the file was unmapped by the cleaner: those are gone
                self.removed = True
        return _Run()


class QueueReader:
    """Reads ConsumeQueues of one store through its CommitLog, within its pull caps."""

    def __init__(self, commit_log: CommitLog, config: StoreConfig) -> None:
        self.commit_log = commit_log
        self.config = config
        # Units further than this behind the CommitLog's end count as "in disk": RocketMQ's
        # accessMessageInMemoryMaxRatio share of physical RAM.
        self.memory_limit = physical_memory() * config.access_message_in_memory_max_ratio // 100

    def read(
        self,
        queue: ConsumeQueue | None,
        offset: int,
        max_messages: int,
        max_bytes: int | None,
        codes: frozenset[int] | None,
        views: bool = False,
        on_slave: bool = False,
        matches: PropertyTest | None = None,
    ) -> GetMessageResult:
        """Up to ``max_messages`` of ``queue`` from ``offset`` whose tags code is in
        ``codes`` (None: every message) and whose properties pass ``matches`` (None: all);
        ``views``: as views, in the result's ``views``; ``on_slave``: read by a slave (see
        :func:`next_offset_correction`). No queue (None): NO_MATCHED_LOGIC_QUEUE."""
        if queue is None:
            missing = next_offset_correction(offset, 0, on_slave)
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, missing, 0, 0)
        min_offset, max_offset = queue.min_offset, queue.max_offset
        status, next_offset = position_status(offset, min_offset, max_offset, on_slave=on_slave)
        if status is not None:
            return GetMessageResult(status, next_offset, min_offset, max_offset)
        max_messages = max(1, max_messages)
        window = max(_UNITS_WINDOW, max_messages * CQ_UNIT_SIZE)
        # Unfiltered, the batch nearly always fills from its first max_messages units: read
        # those alone first, the whole window only when they fall short (blank or gone).
        first = max_messages * CQ_UNIT_SIZE if codes is None and matches is None else window
        found = queue.get_units(offset, first)
        if found is None:
            next_file = next_offset_correction(offset, queue.roll_next_file(offset), on_slave)
            return GetMessageResult(
                GetMessageStatus.OFFSET_FOUND_NULL, next_file, min_offset, max_offset
            )
        limits = self.transfer_limits(max_messages, max_bytes)
        if views:
            topic = queue_topic(queue.topic)
            seen = self.read_units(found[0], limits, codes, message_view, topic, matches)
            if _short(seen, found[0], first, window, max_messages):
                units = queue.get_units(offset, window)
                if units is not None:
                    seen = self.read_units(units[0], limits, codes, message_view, topic, matches)
            status, next_offset = _read_status(seen), offset + seen.scanned
            return GetMessageResult(status, next_offset, min_offset, max_offset, [], seen.found)
        read = self.read_units(found[0], limits, codes, decode_record, None, matches)
        if _short(read, found[0], first, window, max_messages):
            units = queue.get_units(offset, window)
            if units is not None:
                read = self.read_units(units[0], limits, codes, decode_record, None, matches)
        status, next_offset = _read_status(read), offset + read.scanned
        return GetMessageResult(status, next_offset, min_offset, max_offset, read.found)

    def read_records(
        self,
        queue: ConsumeQueue | None,
        offset: int,
        max_bytes: int,
        codes: frozenset[int] | None,
        matches: PropertyTest | None = None,
        end_offset: int | None = None,
        on_slave: bool = False,
    ) -> RecordRange:
        """The records of ``queue`` from ``offset`` as stored, up to ``max_bytes`` (the first
        always), read before ``end_offset`` (None: the queue's end), filtered as
        :meth:`read` filters; the statuses are :meth:`read`'s.

        The units are read a window at a time, from one ConsumeQueue file and then the next;
        records that lie one after another in a CommitLog file are copied in one piece.
        """
        if queue is None:
            missing = next_offset_correction(offset, 0, on_slave)
            return RecordRange(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, missing, 0, 0)
        min_offset, max_offset = queue.min_offset, queue.max_offset
        status, next_offset = position_status(offset, min_offset, max_offset, on_slave=on_slave)
        if status is not None:
            return RecordRange(status, next_offset, min_offset, max_offset)
        stop = max_offset if end_offset is None else max(offset + 1, min(end_offset, max_offset))
        copy = _RangeCopy(bytearray(), max(1, max_bytes))
        current = offset
        while current < stop and not copy.full:
            found = queue.get_units(current, min(_RANGE_WINDOW, (stop - current) * CQ_UNIT_SIZE))
            if found is None or not found[0]:
                if current == offset:
                    next_file = next_offset_correction(
                        offset, queue.roll_next_file(offset), on_slave
                    )
                    return RecordRange(
                        GetMessageStatus.OFFSET_FOUND_NULL, next_file, min_offset, max_offset
                    )
                break
            before = copy.scanned
            self.copy_records(found[0], copy, codes, matches)
            current = offset + copy.scanned
            if copy.scanned == before:
                break
        status = _range_status(copy)
        return RecordRange(status, current, min_offset, max_offset, bytes(copy.out), copy.count)

    def copy_records(
        self,
        units: bytes,
        copy: _RangeCopy,
        codes: frozenset[int] | None,
        matches: PropertyTest | None,
    ) -> None:
        """Append the records of a run of units to ``copy`` until its budget is spent (the
        first record always); the skipping rules are :meth:`read_units`'."""
        find_file = self.commit_log.queue.find_by_offset
        buffer: mmap.mmap | bytes = b""
        file_start = readable_end = 0
        run = _Run()  # records one after another in ``buffer``, not copied yet
        for physical, size, code in CQ_UNIT_STRUCT.iter_unpack(units):
            if size == PRE_BLANK_SIZE or (codes is not None and to_int32(code) not in codes):
                copy.scanned += 1
                continue
            if (copy.count or run.count) and copy.taken + run.size + size > copy.budget:
                copy.full = True
                break
            copy.scanned += 1
            if physical < file_start or physical + size > readable_end:
                run = copy.take(run, buffer, file_start)
                mapped = find_file(physical)
                if mapped is None or physical + size > mapped.file_from_offset + (
                    mapped.read_position
                ):
                    copy.removed = True  # no longer in the CommitLog, or not readable
                    readable_end = 0
                    continue
                buffer = mapped.buffer
                file_start = mapped.file_from_offset
                readable_end = file_start + mapped.read_position
            if matches is not None:
                try:
                    if not matches(stored_properties(buffer, physical - file_start)):
                        continue
                except ValueError:  # the file was unmapped by the cleaner
                    copy.removed = True
                    readable_end = 0
                    run = _Run()
                    continue
            if physical != run.end:
                run = copy.take(run, buffer, file_start)
                run.start = run.end = physical
            run.end += size
            run.count += 1
        copy.take(run, buffer, file_start)

    def transfer_limits(self, max_messages: int, max_bytes: int | None) -> TransferLimits:
        """The caps of one pull: the caller's, within the store's in-memory and in-disk
        ones."""
        config = self.config
        memory_bytes = config.max_transfer_bytes_in_memory
        if max_bytes is not None:
            memory_bytes = min(memory_bytes, max_bytes)
        return TransferLimits(
            max_messages,
            memory_bytes,
            config.max_transfer_count_in_memory,
            min(memory_bytes, config.max_transfer_bytes_in_disk),
            config.max_transfer_count_in_disk,
            self.commit_log.max_offset - self.memory_limit,
        )

    def read_units(
        self,
        units: bytes,
        limits: TransferLimits,
        codes: frozenset[int] | None,
        take: Callable[..., T],
        topic: QueueTopic | None = None,
        matches: PropertyTest | None = None,
    ) -> UnitsRead[T]:
        """The records of a run of ConsumeQueue units, up to the batch caps (reference §10.3),
        each as ``take`` makes it of the buffer and position of a record (and ``topic``, the
        queue's, unless None): decoded (:func:`decode_record`) or a view
        (:func:`message_view`).

        Units whose tags code is not in ``codes`` (None: all match), records whose
        properties fail ``matches`` (RocketMQ's ``isMatchedByCommitLog``) and pre-blank units
        are skipped but count as scanned. A unit is "in disk" below ``limits.disk_threshold``:
        its batch caps are the smaller disk ones. The first message always goes out.
        """
        memory_bytes, memory_count = limits.memory_bytes, limits.memory_count
        disk_bytes, disk_count = limits.disk_bytes, limits.disk_count
        max_messages, disk_threshold = limits.max_messages, limits.disk_threshold
        find_file = self.commit_log.queue.find_by_offset
        found: list[T] = []
        append = found.append
        count = total = scanned = 0
        removed = False
        # Records are read straight from the mapping of the CommitLog file of the
        # previous unit (a batch nearly always stays in one file): no lookup and no copy
        # of the record per message. ``readable_end`` 0 forces a lookup.
        buffer: mmap.mmap | bytes = b""
        file_start = readable_end = 0
        for physical, size, code in CQ_UNIT_STRUCT.iter_unpack(units):
            if count:  # RocketMQ's isTheBatchFull; never before the first message
                if count >= max_messages:
                    break
                if physical < disk_threshold:
                    if total + size > disk_bytes or count >= disk_count:
                        break
                elif total + size > memory_bytes or count >= memory_count:
                    break
            scanned += 1
            if size == PRE_BLANK_SIZE or (codes is not None and to_int32(code) not in codes):
                continue
            if physical < file_start or physical + size > readable_end:
                mapped = find_file(physical)
                if mapped is None:
                    removed = True  # no longer in the CommitLog
                    continue
                buffer = mapped.buffer
                file_start = mapped.file_from_offset
                readable_end = file_start + mapped.read_position
                if physical + size > readable_end:
                    removed = True  # not (or no longer) readable
                    readable_end = 0
                    continue
            try:
                if matches is not None and not matches(
                    stored_properties(buffer, physical - file_start)
                ):
                    continue
                if topic is None:
                    record = take(buffer, physical - file_start)
                else:
                    record = take(buffer, physical - file_start, topic)
            except ValueError:  # the file was unmapped by the cleaner
                removed = True
                readable_end = 0
                continue
            append(record)
            count += 1
            total += size
        return UnitsRead(found, scanned, removed)


def _short(read: UnitsRead[T], units: bytes, asked: int, window: int, max_messages: int) -> bool:
    """Whether reading the whole ``window`` of units may find more than ``read`` of the first
    ``asked`` bytes did: every unit of them examined (no cap stopped the batch), fewer than
    ``max_messages`` records found, and more units may follow (the file had ``asked`` bytes
    to give, and the window is larger)."""
    return (
        asked < window
        and len(units) == asked
        and read.scanned * CQ_UNIT_SIZE == asked
        and len(read.found) < max_messages
    )


def position_status(
    offset: int, min_offset: int, max_offset: int, *, on_slave: bool = False
) -> tuple[GetMessageStatus | None, int]:
    """The status decided by the offset alone, and the next offset; None to read units.

    Far past the end the next offset is the min offset when that is 0, else the max offset:
    RocketMQ 4.x's rule, which the reference follows (5.x always answers the max offset).
    """
    if max_offset == 0:
        status, corrected = GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
    elif offset < min_offset:
        status, corrected = GetMessageStatus.OFFSET_TOO_SMALL, min_offset
    elif offset == max_offset:
        status, corrected = GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
    elif offset > max_offset:
        status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
        corrected = min_offset if min_offset == 0 else max_offset
    else:
        return None, offset
    return status, next_offset_correction(offset, corrected, on_slave)


def next_offset_correction(offset: int, corrected: int, on_slave: bool) -> int:
    """Where a pull at an offset that is wrong for its queue goes on (RocketMQ's
    ``nextOffsetCorrection``): ``corrected`` on a master; ``offset`` itself on a slave
    (``offsetCheckInSlave`` off), which may only be behind its master and must not move a
    consumer back."""
    return offset if on_slave else corrected


def _range_status(copy: _RangeCopy) -> GetMessageStatus:
    if copy.count:
        return GetMessageStatus.FOUND
    if copy.removed:
        return GetMessageStatus.MESSAGE_WAS_REMOVING
    return GetMessageStatus.NO_MATCHED_MESSAGE


def _read_status(read: UnitsRead[T]) -> GetMessageStatus:
    if read.found:
        return GetMessageStatus.FOUND
    if read.removed:  # a removed message before any found one
        return GetMessageStatus.MESSAGE_WAS_REMOVING
    return GetMessageStatus.NO_MATCHED_MESSAGE


def physical_memory() -> int:
    """Bytes of RAM of this machine."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - every Linux has both
        return 8 * 1024**3

"""CommitLog: one append-only log of every topic's records, in fixed-size MappedFiles.

Appends assign the queue offset of each (topic, queue) and the physical offset inside the
append. A record that does not fit in the rest of a file (``size + 8 > remaining``) is
preceded by an 8-byte BLANK that fills the file, and goes to the next file; a batch never
straddles two files.

The CommitLog is the one owner of its files' layout: appends, reads by offset, scans and
recovery. The pull read loop over its files is :mod:`storage.queue_reader`'s.
"""

from __future__ import annotations

import errno
import mmap
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Final

from storage.errors import (
    MessageRejectedError,
    MessageTooLargeError,
    StorageError,
    StoreNotWriteableError,
)
from storage.mapped_file import MappedFile
from storage.mapped_file_queue import MappedFileQueue
from storage.record.decode import (
    RecordCheck,
    RecordKind,
    check_record,
    check_v4_record,
    decode_record,
    read_store_timestamp,
)
from storage.record.encode import OUT_OF_RANGE, EncodedBatch, EncodedMessage
from storage.record.layout import (
    BLANK_MAGIC_CODE,
    BLANK_STRUCT,
    END_FILE_MIN_BLANK_LENGTH,
    INT_STRUCT,
    MESSAGE_MAGIC_CODES,
    SIZE_AND_MAGIC,
    SYSFLAG_POSITION,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from storage.record.message import Appended, StoredMessage
from storage.record.msg_id import decode_msg_id, encode_host
from storage.record.uniform_batch import UniformBatch

PREFAULT_AHEAD: Final = 1024 * 1024
"""Pages mapped in ahead of the write position, asked for again every half of that."""


RecoveredRecordSink = Callable[[int, int, bytes, int, "mmap.mmap | bytes"], None]
"""Called for each valid record during recovery: (physical offset, size, topic bytes,
queue id, buffer). For the common layout the buffer is the file's mapping and the record
sits at ``physical offset - file start``; otherwise topic is ``b""``, queue id -1 and the
buffer holds exactly the record."""


class ReplicaAppendError(StorageError):
    """Replicated bytes do not continue this CommitLog (wrong offset, or they span files)."""

    code: ClassVar[str] = "REPLICA_APPEND_REJECTED"


@dataclass(slots=True)  # not frozen: cheaper to build, once per put (see StoredMessage)
class AppendResult:
    """Where one record went."""

    physical_offset: int
    size: int
    queue_offset: int
    store_timestamp: int


@dataclass(frozen=True, slots=True)
class ScannedRecord:
    """One position of a CommitLog scan."""

    offset: int
    check: RecordCheck
    data: bytes


@dataclass(slots=True)  # not frozen: one per batch, cheaper to build (see StoredMessage)
class AppendedBatch:
    """Where one batch went: what its dispatch and its put results need, as plain lists."""

    topic: str
    queue_id: int
    first_queue_offset: int
    offsets: list[int]  # physical offset of each record
    sizes: list[int]
    units: bytes  # the batch's ConsumeQueue units, packed
    tags_codes: list[int]
    keys: list[str | None]
    uniq_keys: list[str | None]
    store_timestamp: int
    end_offset: int
    idempotency_keys: list[tuple[int, str]]  # (record number, key) of the keyed records

    def appended(self, msg_id_prefix: str) -> Appended:
        """The batch as a put's answer; ``msg_id_prefix``: the store's (see ``msg_id``)."""
        return Appended(
            msg_id_prefix,
            self.topic,
            self.queue_id,
            self.first_queue_offset,
            self.offsets,
            self.sizes,
            self.store_timestamp,
        )


class CommitLog:
    """The shared log: append, read by physical offset, scan, recover."""

    def __init__(self, directory: Path, file_size: int, store_host: tuple[str, int]) -> None:
        self.queue = MappedFileQueue(directory, file_size)
        self.file_size = file_size
        self.store_host = store_host
        self.store_address = encode_host(store_host[0])
        self.store_v6 = len(self.store_address) == 16
        self.topic_queue_table: dict[tuple[str, int], int] = {}
        # The largest record (or batch) a file can take next to its end-of-file blank.
        self.max_append_size = file_size - END_FILE_MIN_BLANK_LENGTH

    # ------------------------------------------------------------------ append

    def append(self, message: EncodedMessage, store_timestamp: int) -> AppendResult:
        """Append one encoded record; rolls to a new file when it does not fit."""
        size = message.size
        if size > self.max_append_size:
            raise MessageTooLargeError(
                f"record of {size} bytes does not fit in a CommitLog file of {self.file_size}"
            )
        files = self.queue.files
        if files and size + END_FILE_MIN_BLANK_LENGTH <= self.file_size - files[-1].wrote_position:
            mapped = files[-1]  # the common case: room in the last file
        else:
            mapped = self._file_with_room(size)
        return self._append_in(mapped, message, store_timestamp)

    def append_encoded_batch(
        self, batch: EncodedBatch | UniformBatch, store_timestamp: int
    ) -> AppendedBatch:
        """Append a batch of one (topic, queue) with consecutive queue offsets, in one file,
        with one ``pwrite``. Nothing reaches the file, and no queue offset moves, unless
        every record packs."""
        total = batch.size
        if total > self.max_append_size:
            raise MessageTooLargeError(
                f"batch of {total} bytes does not fit in a CommitLog file of {self.file_size}"
            )
        mapped = self._file_with_room(total)
        key = (batch.topic, batch.queue_id)
        table = self.topic_queue_table
        first_queue_offset = table.get(key, 0)
        base = mapped.file_from_offset + mapped.wrote_position
        try:
            data, units, offsets = batch.pack(
                base, first_queue_offset, store_timestamp, self.store_address, self.store_host[1]
            )
        except struct.error:
            # Nothing is acknowledged or written: the write position has not moved.
            raise MessageRejectedError(OUT_OF_RANGE) from None
        try:
            mapped.write_append(data)
        except OSError as exc:
            reason = "disk full" if exc.errno == errno.ENOSPC else "file error"
            raise StoreNotWriteableError(f"{reason}: cannot write the CommitLog: {exc}") from exc
        mapped.store_timestamp = store_timestamp
        table[key] = first_queue_offset + batch.count
        return AppendedBatch(
            batch.topic,
            batch.queue_id,
            first_queue_offset,
            offsets,
            batch.sizes,
            units,
            batch.tags_codes,
            batch.keys,
            batch.uniq_keys,
            store_timestamp,
            base + total,
            batch.idempotency_keys,
        )

    def append_raw(self, offset: int, data: bytes) -> int:
        """Append bytes replicated from a master at ``offset``; the new max offset.

        ``offset`` must be this log's max offset, or, for an empty log, the start of a file
        (a slave at 0 is sent from the start of the master's last file). A chunk never spans
        two files: the master sends a file's bytes up to its end, BLANK included.
        Queue offsets are not touched here: the store dispatches the records.
        """
        files = self.queue.files
        if files:
            if offset != self.max_offset:
                raise ReplicaAppendError(
                    f"replicated bytes start at {offset} but this CommitLog ends at "
                    f"{self.max_offset}"
                )
        elif offset % self.file_size:
            raise ReplicaAppendError(
                f"an empty CommitLog takes replicated bytes only from a file start; got {offset}"
            )
        if not data:
            return offset
        position = offset % self.file_size
        if position + len(data) > self.file_size:
            raise ReplicaAppendError(
                f"{len(data)} replicated bytes at {offset} would span two CommitLog files"
            )
        try:
            mapped = self.queue.get_last_mapped_file(offset)
        except OSError as exc:
            raise StoreNotWriteableError(f"cannot create a CommitLog file: {exc}") from exc
        if mapped is None or mapped.file_from_offset + mapped.wrote_position != offset:
            raise ReplicaAppendError(f"no CommitLog file takes replicated bytes at {offset}")
        try:
            mapped.write_append(data)
        except OSError as exc:
            reason = "disk full" if exc.errno == errno.ENOSPC else "file error"
            raise StoreNotWriteableError(f"{reason}: cannot write the CommitLog: {exc}") from exc
        return offset + len(data)

    def _append_in(
        self, mapped: MappedFile, message: EncodedMessage, store_timestamp: int
    ) -> AppendResult:
        """Write one record at the write position of ``mapped`` (known to have room).

        Packed in place: for one small record a ``pwrite`` (a buffer and a system call)
        costs more than the page faults it saves.
        """
        key = (message.topic, message.queue_id)
        # Prepared and rolled-back transaction halves take no queue offset (reference §2.3).
        dispatchable = message.is_dispatchable
        queue_offset = self.topic_queue_table.get(key, 0) if dispatchable else 0
        position = mapped.wrote_position
        physical_offset = mapped.file_from_offset + position
        try:
            message.write_into(
                mapped.buffer,
                position,
                queue_offset,
                physical_offset,
                store_timestamp,
                self.store_address,
                self.store_host[1],
            )
        except struct.error:
            # Nothing is acknowledged: the write position has not moved, and the next
            # append (or recovery) overwrites (or cuts) whatever was packed before the error.
            raise MessageRejectedError(OUT_OF_RANGE) from None
        size = message.size
        mapped.wrote_position = position + size
        mapped.store_timestamp = max(mapped.store_timestamp, store_timestamp)
        if dispatchable:
            self.topic_queue_table[key] = queue_offset + 1
        if position + size >= mapped.prefault_next:
            self._prefault_ahead(mapped)
        return AppendResult(physical_offset, size, queue_offset, store_timestamp)

    def _prefault_ahead(self, mapped: MappedFile) -> None:
        """Have the allocator's worker map in the pages ahead of the write position.

        Only records packed into the map ask for it: a batch's ``pwrite`` takes no page
        fault, and mapping pages in for it would only add work.
        """
        allocator = self.queue.allocator
        end = min(mapped.file_size, mapped.wrote_position + PREFAULT_AHEAD)
        # Ask again half way there; never again once the file's end is asked for.
        mapped.prefault_next = end - PREFAULT_AHEAD // 2 if end < mapped.file_size else end + 1
        if allocator is not None:
            allocator.prefault(mapped, end)

    def _file_with_room(self, size: int) -> MappedFile:
        """The last file if ``size`` plus a blank fits, else a fresh file after a BLANK."""
        mapped = self._last_file()
        remaining = mapped.remaining
        if size + END_FILE_MIN_BLANK_LENGTH > remaining:
            BLANK_STRUCT.pack_into(
                mapped.buffer, mapped.wrote_position, remaining, BLANK_MAGIC_CODE
            )
            mapped.wrote_position = mapped.file_size
            mapped = self._last_file()
        return mapped

    def _last_file(self) -> MappedFile:
        try:
            mapped = self.queue.get_last_mapped_file(0)
        except OSError as exc:
            reason = "disk full" if exc.errno == errno.ENOSPC else "file error"
            raise StoreNotWriteableError(
                f"{reason}: cannot create a CommitLog file: {exc}"
            ) from exc
        if mapped is None:  # pragma: no cover - get_last_mapped_file creates
            raise StoreNotWriteableError("no CommitLog file to append to")
        return mapped

    # ------------------------------------------------------------------ read

    @property
    def min_offset(self) -> int:
        """Start of the first file that still holds a record; -1 when empty."""
        first = self.queue.first_file()
        if first is None:
            return -1
        return first.file_from_offset

    @property
    def max_offset(self) -> int:
        return self.queue.max_offset

    def read(self, physical_offset: int, size: int) -> bytes | None:
        """``size`` bytes at ``physical_offset``, or None if not (or no longer) there."""
        mapped = self.queue.find_by_offset(physical_offset)
        if mapped is None:
            return None
        try:
            return mapped.read(physical_offset - mapped.file_from_offset, size)
        except ValueError:  # the file was unmapped by the cleaner
            return None

    def read_record(self, physical_offset: int) -> bytes | None:
        """The whole record starting at ``physical_offset`` (size taken from its TOTALSIZE)."""
        head = self.read(physical_offset, 8)
        if head is None:
            return None
        total_size, magic = BLANK_STRUCT.unpack(head)
        if magic not in MESSAGE_MAGIC_CODES or total_size <= 8:
            return None
        return self.read(physical_offset, total_size)

    def look_message(self, physical_offset: int) -> StoredMessage | None:
        """The message record starting at ``physical_offset``; None if there is none."""
        data = self.read_record(physical_offset)
        if data is None:
            return None
        check = check_record(data, 0, len(data), check_crc=False)
        if check.kind is not RecordKind.MESSAGE:
            return None
        return decode_record(data)

    def look_message_by_id(self, msg_id: str) -> StoredMessage | None:
        """The record an offsetMsgId points at; None when malformed or gone."""
        try:
            decoded = decode_msg_id(msg_id)
        except ValueError:
            return None
        message = self.look_message(decoded.physical_offset)
        if message is None or message.physical_offset != decoded.physical_offset:
            return None
        return message

    def store_time_of(self, physical_offset: int, size: int) -> int:
        data = self.read(physical_offset, size)
        if data is None:
            return -1
        return read_store_timestamp(data)

    def scan(self, from_offset: int, to_offset: int | None = None) -> Iterator[ScannedRecord]:
        """Records from ``from_offset`` to the end of readable data (or ``to_offset``).

        Blanks are stepped over. The scan ends at the end of data; at a torn or corrupt
        record it yields that position (kind END or CORRUPT, no data) and stops.
        """
        offset = max(from_offset, self.queue.min_offset)
        end = self.max_offset if to_offset is None else min(to_offset, self.max_offset)
        while offset < end:
            mapped = self.queue.find_by_offset(offset)
            if mapped is None:
                return
            position = offset - mapped.file_from_offset
            limit = mapped.read_position
            check = check_record(mapped.buffer, position, limit, check_crc=False)
            if check.kind is RecordKind.BLANK:
                offset = self.queue.roll_next_file(offset)
                continue
            if check.kind is not RecordKind.MESSAGE:
                if position >= limit and mapped.is_full:
                    offset = self.queue.roll_next_file(offset)
                    continue
                yield ScannedRecord(offset, check, b"")
                return
            data = mapped.buffer[position : position + check.size]
            yield ScannedRecord(offset, check, data)
            offset += check.size

    def end_of_complete_records(self, from_offset: int) -> int:
        """Where the whole records from ``from_offset`` end: the log's end, or the start of
        a torn record at its tail."""
        for scanned in self.scan(from_offset):
            if scanned.check.kind is not RecordKind.MESSAGE:
                return scanned.offset
        return self.max_offset

    def cut(self, offset: int) -> None:
        """Drop the bytes from ``offset`` to the end (zeroed, so no torn header is left)."""
        mapped = self.queue.find_by_offset(offset)
        if mapped is not None:
            position = offset - mapped.file_from_offset
            written = mapped.wrote_position
            if written > position:
                mapped.buffer[position:written] = bytes(written - position)
        self.queue.truncate_dirty_files(offset)

    # ------------------------------------------------------------------ recovery

    def load(self) -> None:
        self.queue.load()

    def recover_normally(self, check_crc: bool) -> tuple[int, list[str]]:
        """Scan the last three files; returns the end of the last valid record and findings."""
        files = self.queue.files
        if not files:
            return 0, []
        start = max(0, len(files) - 3)
        return self._recover_from(start, check_crc, None)

    def recover_abnormally(
        self,
        min_timestamp: int,
        check_crc: bool,
        dispatch: RecoveredRecordSink,
    ) -> tuple[int, list[str]]:
        """Scan from the newest file that starts before ``min_timestamp``, dispatching records."""
        files = self.queue.files
        if not files:
            return 0, []
        start = 0
        for index in range(len(files) - 1, -1, -1):
            if self._first_record_before(files[index], min_timestamp):
                start = index
                break
        return self._recover_from(start, check_crc, dispatch)

    def _first_record_before(self, mapped: MappedFile, min_timestamp: int) -> bool:
        _size, magic = SIZE_AND_MAGIC.unpack_from(mapped.buffer, 0)
        if magic not in MESSAGE_MAGIC_CODES:
            return False
        sys_flag = INT_STRUCT.unpack_from(mapped.buffer, SYSFLAG_POSITION)[0]
        if sys_flag & TRANSACTION_TYPE_MASK == TRANSACTION_COMMIT_TYPE:
            # A committed transaction keeps its half's earlier store time: it does not tell
            # when the file was begun, so look further back.
            return False
        stored = read_store_timestamp(mapped.buffer, 0)
        return stored != 0 and stored <= min_timestamp

    def _recover_from(
        self, start: int, check_crc: bool, dispatch: RecoveredRecordSink | None
    ) -> tuple[int, list[str]]:
        files = self.queue.files
        findings: list[str] = []
        process_offset = files[start].file_from_offset
        for mapped in files[start:]:
            position, finding = self._scan_file(mapped, check_crc, dispatch)
            process_offset = mapped.file_from_offset + position
            if finding:
                findings.append(finding)
                break
            if position < self.file_size:
                break
        self.queue.flushed_where = process_offset
        self.queue.truncate_dirty_files(process_offset)
        return process_offset, findings

    def _scan_file(
        self,
        mapped: MappedFile,
        check_crc: bool,
        dispatch: RecoveredRecordSink | None,
    ) -> tuple[int, str]:
        """Valid bytes from the start of ``mapped`` and, if it ended badly, why.

        The common layout (IPv4 hosts) is checked inline — TOTALSIZE against the field
        lengths, then the body CRC — because recovery walks every record of a large log;
        anything else goes through the general ``check_record``.
        """
        buffer = mapped.buffer
        file_size = self.file_size
        base = mapped.file_from_offset
        position = 0
        while position < file_size:
            valid = check_v4_record(buffer, position, file_size, check_crc)
            if valid is not None:
                size, queue_id, body_end = valid
                if dispatch is not None:
                    topic = buffer[body_end + 1 : body_end + 1 + buffer[body_end]]
                    dispatch(base + position, size, topic, queue_id, buffer)
                position += size
                continue
            check = check_record(buffer, position, file_size, check_crc)
            if check.kind is RecordKind.MESSAGE:
                if dispatch is not None:
                    record = buffer[position : position + check.size]
                    dispatch(base + position, check.size, b"", -1, record)
                position += check.size
                continue
            if check.kind is RecordKind.BLANK:
                return file_size, ""
            if check.kind is RecordKind.CORRUPT:
                return position, (
                    f"commitlog {mapped.path.name}: {check.reason} at offset "
                    f"{base + position}; truncated there"
                )
            if _has_data_after(buffer, position, file_size):
                return position, (
                    f"commitlog {mapped.path.name}: torn record at offset "
                    f"{base + position}; truncated there"
                )
            return position, ""
        return position, ""

    def forget_queue_offsets(self, topic: str) -> None:
        """Drop the next queue offsets of a deleted topic: a new one starts at 0."""
        for key in [key for key in self.topic_queue_table if key[0] == topic]:
            del self.topic_queue_table[key]

    def rebuild_topic_queue_table(self, table: dict[tuple[str, int], int]) -> None:
        self.topic_queue_table = dict(table)

    def flush(self, least_pages: int) -> bool:
        return self.queue.flush(least_pages)

    @property
    def flushed_where(self) -> int:
        return self.queue.flushed_where

    def close(self) -> None:
        self.queue.close()


def _has_data_after(buffer: mmap.mmap, position: int, limit: int) -> bool:
    """Whether anything but zeros follows ``position`` in the next page (a torn write)."""
    window = buffer[position : min(limit, position + 4096)]
    return window.count(0) != len(window)

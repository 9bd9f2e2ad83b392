"""Reading records: what lies at a position of the CommitLog, and the message decoded.

Framing is written once, here: :func:`check_record` says what lies at a position (a short
tail or zeros are the end of the log; only an impossible length, an unknown magic code or a
CRC mismatch is corruption), through :func:`check_v4_record` for the common layout (v1,
IPv4 hosts), which recovery and the readers run over every record of a large log;
:func:`walk_records` follows TOTALSIZE from record to record with them. Every CommitLog
walk (recovery, the store reader, the Spark readers) uses these.
:func:`decode_record` turns a checked record into a
:class:`~storage.record.message.StoredMessage`.
"""

from __future__ import annotations

import zlib
from array import array
from dataclasses import dataclass
from enum import Enum

from storage.record.layout import (
    BLANK_MAGIC_CODE,
    BODY_CRC_POSITION,
    BORN_HOST_POSITION,
    CRC_MASK,
    HEAD_TO_SYSFLAG,
    HOST_V6_BITS,
    INT_STRUCT,
    LONG_STRUCT,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    RECORD_HEADER_V4,
    SHORT_STRUCT,
    SIZE_AND_MAGIC,
    SYSFLAG_POSITION,
    Buffer,
    record_header_struct,
    store_timestamp_position,
)
from storage.record.message import StoredMessage
from storage.record.msg_id import HOST_NAMES, decode_host
from storage.record.properties import decode_properties

_HEAD_TO_SYSFLAG = HEAD_TO_SYSFLAG.unpack_from
_unpack_int = INT_STRUCT.unpack_from
_unpack_short = SHORT_STRUCT.unpack_from


class RecordKind(Enum):
    """What a scan finds at a position of the CommitLog."""

    MESSAGE = "message"  # a complete, valid record
    BLANK = "blank"  # end-of-file filler: go to the next file
    END = "end"  # zero magic or a short tail: the end of written data
    CORRUPT = "corrupt"  # impossible length, unknown magic or CRC mismatch


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """The outcome of checking one record: its kind, its size for a message, and why a
    CORRUPT (or cut short) record is one."""

    kind: RecordKind
    size: int
    reason: str = ""


def classify_start(position: int, limit: int, total_size: int, magic: int) -> RecordCheck | None:
    """What the first 8 bytes of a record say by themselves: None for a message record that
    fits before ``limit`` (its fields are checked next), else the BLANK, END or CORRUPT
    verdict. The framing rule every CommitLog walk shares."""
    if magic == BLANK_MAGIC_CODE:
        return RecordCheck(RecordKind.BLANK, 0)
    minimum = MIN_RECORD_SIZE.get(magic)
    if minimum is None:
        if magic == 0 and total_size == 0:
            return RecordCheck(RecordKind.END, 0)
        return RecordCheck(RecordKind.CORRUPT, 0, f"unknown magic code {magic & 0xFFFFFFFF:#010x}")
    if total_size < minimum:
        return RecordCheck(RecordKind.CORRUPT, 0, f"impossible record size {total_size}")
    if position + total_size > limit:
        return RecordCheck(RecordKind.END, 0, "record is cut short")
    return None


def _layout_end(buffer: Buffer, position: int, limit: int, magic: int) -> int | None:
    """Where the record at ``position`` ends according to its own field lengths, or None."""
    if position + BORN_HOST_POSITION > limit:
        return None
    header = record_header_struct(_unpack_int(buffer, position + SYSFLAG_POSITION)[0])
    p = position + header.size
    if p > limit:
        return None
    body_length = _unpack_int(buffer, p - 4)[0]
    if body_length < 0:
        return -1
    p += body_length
    if magic == MESSAGE_MAGIC_CODE_V2:
        if p + 2 > limit:
            return None
        p += 2 + _unpack_short(buffer, p)[0]
    else:
        if p + 1 > limit:
            return None
        p += 1 + buffer[p]
    if p + 2 > limit:
        return None
    properties_length = _unpack_short(buffer, p)[0]
    if properties_length < 0:
        return -1
    return int(p + 2 + properties_length)


def _body_crc_matches(buffer: Buffer, position: int) -> bool:
    stored = _unpack_int(buffer, position + BODY_CRC_POSITION)[0]
    header = record_header_struct(_unpack_int(buffer, position + SYSFLAG_POSITION)[0])
    start = position + header.size
    body_length = _unpack_int(buffer, start - 4)[0]
    return bool(zlib.crc32(buffer[start : start + body_length]) & CRC_MASK == stored)


def check_record(buffer: Buffer, position: int, limit: int, check_crc: bool) -> RecordCheck:
    """Check the record at ``position``; ``limit`` is the end of readable data in ``buffer``.

    A short tail or a zero magic is the normal end of the log (END); only an impossible
    length, an unknown magic or a CRC mismatch is CORRUPT.
    """
    common = check_v4_record(buffer, position, limit, check_crc)
    if common is not None:
        return RecordCheck(RecordKind.MESSAGE, common[0])
    if position + SIZE_AND_MAGIC.size > limit:
        return RecordCheck(RecordKind.END, 0)
    total_size, magic = SIZE_AND_MAGIC.unpack_from(buffer, position)
    verdict = classify_start(position, limit, total_size, magic)
    if verdict is not None:
        return verdict
    if _layout_end(buffer, position, position + total_size, magic) != position + total_size:
        return RecordCheck(
            RecordKind.CORRUPT, total_size, f"TOTALSIZE {total_size} does not match the fields"
        )
    if check_crc and not _body_crc_matches(buffer, position):
        return RecordCheck(RecordKind.CORRUPT, total_size, "body CRC mismatch")
    return RecordCheck(RecordKind.MESSAGE, total_size)


def check_v4_record(
    buffer: Buffer, position: int, limit: int, check_crc: bool
) -> tuple[int, int, int] | None:
    """(size, queue id, body end) of a valid v1 record with IPv4 hosts at ``position``.

    None for anything else: the caller then asks :func:`check_record`, which also says what
    it found (another layout, BLANK, END, CORRUPT). The same verdict as ``check_record`` for
    the common layout, with one header unpack and the literals of that layout (88-byte
    header, 91-byte minimum, BODY LENGTH at 84).
    """
    if position + 91 > limit:  # FIXED_OVERHEAD_V4
        return None
    total, magic, crc, queue_id, _, _, _, sys_flag = _HEAD_TO_SYSFLAG(buffer, position)
    end = position + total
    if magic != MESSAGE_MAGIC_CODE or sys_flag & HOST_V6_BITS or total < 91 or end > limit:
        return None
    body_end = position + 88 + _unpack_int(buffer, position + 84)[0]
    if body_end + 3 > end or body_end < position + 88:
        return None
    properties_at = body_end + 1 + buffer[body_end]
    if (
        properties_at + 2 > end
        or properties_at + 2 + _unpack_short(buffer, properties_at)[0] != end
    ):
        return None
    if check_crc and zlib.crc32(buffer[position + 88 : body_end]) & CRC_MASK != crc:
        return None
    return total, queue_id, body_end


@dataclass(frozen=True, slots=True)
class Boundary:
    """A position reached by a walk: a record starts there (MESSAGE) or the walk stopped.

    ``kind`` is BLANK when the file ended with its end-of-file filler, END at the end of
    written data (zeros, a record cut short, the end of the buffer) and CORRUPT at an
    impossible record; ``reason`` says why for CORRUPT.
    """

    position: int
    kind: RecordKind
    reason: str = ""

    @property
    def is_record(self) -> bool:
        """Whether a complete record starts at ``position``."""
        return self.kind is RecordKind.MESSAGE


def walk_records(
    buffer: Buffer, start: int, end: int, limit: int, check_crc: bool = False
) -> tuple[array[int], Boundary]:
    """The complete, valid records that start in ``[start, end)``, and where the walk ended.

    ``start`` must be a record boundary and ``limit`` is the end of readable data. The walk
    follows TOTALSIZE and stops early at a BLANK, END or CORRUPT position, which is then the
    boundary returned; otherwise the boundary is the first position at or after ``end``,
    checked like any other (MESSAGE when a complete record starts there). Each record's
    size is the distance to the next position (the last one's: to the boundary).
    """
    positions: array[int] = array("q")
    append = positions.append
    common = check_v4_record
    position = start
    while position < end:
        found = common(buffer, position, limit, check_crc)
        if found is not None:
            append(position)
            position += found[0]
            continue
        check = check_record(buffer, position, limit, check_crc)
        if check.kind is not RecordKind.MESSAGE:
            return positions, Boundary(position, check.kind, check.reason)
        append(position)
        position += check.size
    check = check_record(buffer, position, limit, check_crc)
    return positions, Boundary(position, check.kind, check.reason)


def decode_record(buffer: Buffer, position: int = 0) -> StoredMessage:
    """Decode the complete, valid record (v1 or v2) at ``position``."""
    header = RECORD_HEADER_V4
    fields = header.unpack_from(buffer, position)
    # The pull path's common case -- v1, IPv4 hosts -- pays one test for both exceptions.
    if fields[7] & HOST_V6_BITS or fields[1] != -626843481:  # MESSAGE_MAGIC_CODE
        return _decode_other_layout(buffer, position)
    (
        size,
        _magic,
        crc,
        queue_id,
        flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        born_address,
        born_port,
        store_timestamp,
        store_address,
        store_port,
        reconsume_times,
        prepared_offset,
        body_length,
    ) = fields
    p = position + header.size
    body_end = p + body_length
    body = buffer[p:body_end]
    if type(body) is not bytes:  # slices of bytes and mmap already are
        body = bytes(body)
    topic_end = body_end + 1 + buffer[body_end]
    topic = str(buffer[body_end + 1 : topic_end], "utf-8")
    properties_end = topic_end + 2 + _unpack_short(buffer, topic_end)[0]
    properties = decode_properties(buffer[topic_end + 2 : properties_end])
    return StoredMessage(  # positional: the field order of StoredMessage
        topic,
        queue_id,
        queue_offset,
        physical_offset,
        size,
        body,
        properties,
        flag,
        sys_flag,
        crc,
        born_timestamp,
        (HOST_NAMES.get(born_address) or decode_host(born_address), born_port),
        store_timestamp,
        (HOST_NAMES.get(store_address) or decode_host(store_address), store_port),
        reconsume_times,
        prepared_offset,
    )


def stored_properties(buffer: Buffer, position: int = 0) -> dict[str, str]:
    """Every property of the complete, valid record at ``position`` (TAGS and KEYS
    included), without decoding the rest: what a property filter reads."""
    header = RECORD_HEADER_V4
    fields = header.unpack_from(buffer, position)
    if fields[7] & HOST_V6_BITS or fields[1] != -626843481:  # MESSAGE_MAGIC_CODE
        return _decode_other_layout(buffer, position).properties
    body_end = position + header.size + fields[16]
    topic_end = body_end + 1 + buffer[body_end]
    properties_end = topic_end + 2 + _unpack_short(buffer, topic_end)[0]
    return decode_properties(buffer[topic_end + 2 : properties_end])


def _decode_other_layout(buffer: Buffer, position: int) -> StoredMessage:
    """Decode a record with an IPv6 host or in format v2 (a two-byte topic length)."""
    header = record_header_struct(_unpack_int(buffer, position + SYSFLAG_POSITION)[0])
    fields = header.unpack_from(buffer, position)
    body_end = position + header.size + fields[16]
    body = bytes(buffer[position + header.size : body_end])
    if fields[1] == MESSAGE_MAGIC_CODE_V2:
        topic_at = body_end + 2
        topic_end = topic_at + _unpack_short(buffer, body_end)[0]
    else:
        topic_at = body_end + 1
        topic_end = topic_at + buffer[body_end]
    properties_end = topic_end + 2 + _unpack_short(buffer, topic_end)[0]
    return StoredMessage(
        str(buffer[topic_at:topic_end], "utf-8"),
        fields[3],  # QUEUEID
        fields[5],  # QUEUEOFFSET
        fields[6],  # PHYSICALOFFSET
        fields[0],  # TOTALSIZE
        body,
        decode_properties(buffer[topic_end + 2 : properties_end]),
        fields[4],  # FLAG
        fields[7],  # SYSFLAG
        fields[2],  # BODYCRC
        fields[8],  # BORNTIMESTAMP
        (decode_host(fields[9]), fields[10]),
        fields[11],  # STORETIMESTAMP
        (decode_host(fields[12]), fields[13]),
        fields[14],  # RECONSUMETIMES
        fields[15],  # PREPARED TRANSACTION OFFSET
    )


def read_store_timestamp(buffer: Buffer, position: int = 0) -> int:
    """STORETIMESTAMP of the record at ``position`` (its place depends on the born host width)."""
    sys_flag = _unpack_int(buffer, position + SYSFLAG_POSITION)[0]
    return int(LONG_STRUCT.unpack_from(buffer, position + store_timestamp_position(sys_flag))[0])

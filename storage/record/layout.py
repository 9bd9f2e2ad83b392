"""Byte layouts of the store: the CommitLog record (RocketMQ formats v1 and v2), the BLANK
filler at a file's end, and the ConsumeQueue unit. Every struct and position lives here.

CommitLog record, big-endian, IPv4 born and store hosts (each IPv6 host adds 12 bytes)::

    offset size field
         0    4 TOTALSIZE             whole record, this field included
         4    4 MAGICCODE             0xDAA320A7 (v1)
         8    4 BODYCRC               zlib.crc32(body) & 0x7FFFFFFF
        12    4 QUEUEID
        16    4 FLAG
        20    8 QUEUEOFFSET           logical offset in the ConsumeQueue
        28    8 PHYSICALOFFSET        offset of this record in the CommitLog
        36    4 SYSFLAG               0x10 / 0x20: born / store host is IPv6
        40    8 BORNTIMESTAMP
        48  8|20 BORNHOST             address + int port
        56    8 STORETIMESTAMP
        64  8|20 STOREHOSTADDRESS
        72    4 RECONSUMETIMES
        76    8 PREPARED TRANSACTION OFFSET
        84  4+n BODY LENGTH + BODY
      88+n  1+t TOPIC LENGTH (byte) + TOPIC
    89+n+t  2+p PROPERTIES LENGTH (short) + PROPERTIES   name\\x01value\\x02...

The fixed overhead is 91 bytes: topic ``FooBar`` with a 32-byte body and 29 bytes of
properties is a 158-byte record. At the end of a file that cannot take the next record a
BLANK is written: ``[int remaining][int 0xCBD43194]``.

Format v2 (RocketMQ 5.1+, ``MESSAGE_MAGIC_CODE_V2``; a 5.x broker writes it for topics
longer than 127 characters) differs from v1 in exactly two places; a reader dispatches on
the magic code:

* MAGICCODE at offset 4 is ``0xDAA320AB`` (-626843477) instead of ``0xDAA320A7``;
* TOPIC LENGTH is a big-endian **short** (2 bytes, like PROPERTIES LENGTH), not a byte:
  the topic starts at ``88+n+2`` (IPv4 hosts), the properties length at ``90+n+t``, and
  the fixed overhead is 92 bytes (104 / 116 with one / two IPv6 hosts).

Everything else (host widths from SYSFLAG, STORETIMESTAMP position, CRC, properties) is
the same. Reading accepts both; writing is v1 only.

ConsumeQueue unit, 20 bytes::

         0    8 commit log offset
         8    4 size                  0x7FFFFFFF: a pre-blank filler unit
        12    8 tags code             Java String.hashCode of TAGS (delivery time for delays)
"""

from __future__ import annotations

import mmap
import struct
import zlib
from collections.abc import Sequence
from functools import lru_cache
from itertools import repeat
from operator import and_
from typing import Final

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""Anything records are read from or packed into."""

# --------------------------------------------------------------------------- magic codes

MESSAGE_MAGIC_CODE: Final = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2: Final = -626843477  # 0xDAA320AB (two-byte topic length)
MESSAGE_MAGIC_CODES: Final = frozenset((MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2))
"""The magic codes of a message record, v1 and v2."""
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194

# --------------------------------------------------------------------------- integer bounds

INT32_MIN: Final = -(2**31)
INT32_MAX: Final = 2**31 - 1
INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
UINT64_MASK: Final = 2**64 - 1
CRC_MASK: Final = 0x7FFFFFFF
"""RocketMQ keeps 31 bits of the body's CRC-32."""

INT_STRUCT: Final = struct.Struct(">i")
SHORT_STRUCT: Final = struct.Struct(">h")
LONG_STRUCT: Final = struct.Struct(">q")

# --------------------------------------------------------------------------- SYSFLAG bits

# MessageSysFlag.
COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_TYPE_MASK: Final = 0xC
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOSTADDRESS_V6_FLAG: Final = 0x20
HOST_V6_BITS: Final = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG


DISPATCHABLE_TYPES: Final = frozenset((TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE))
"""The transaction types whose records reach a ConsumeQueue (``sys_flag & TYPE_MASK``)."""


def is_dispatchable(sys_flag: int) -> bool:
    """Whether a record reaches a ConsumeQueue: prepared and rolled-back transaction halves
    never do (reference §2.3)."""
    return sys_flag & TRANSACTION_TYPE_MASK in DISPATCHABLE_TYPES


# --------------------------------------------------------------------------- the record

_HEAD: Final = (
    ">"
    "i"  # TOTALSIZE: the whole record, this field included
    "i"  # MAGICCODE: MESSAGE_MAGIC_CODE (v1) or MESSAGE_MAGIC_CODE_V2
    "i"  # BODYCRC: zlib.crc32(body) & CRC_MASK
    "i"  # QUEUEID
    "i"  # FLAG: the producer's, stored as given
    "q"  # QUEUEOFFSET: logical offset in the ConsumeQueue
    "q"  # PHYSICALOFFSET: offset of this record in the CommitLog
    "i"  # SYSFLAG: the bits above
    "q"  # BORNTIMESTAMP: ms, the producer's clock
)
HEAD_STRUCT: Final = struct.Struct(_HEAD)
"""Everything before the born host: the same for every host width and both formats."""

SIZE_AND_MAGIC: Final = struct.Struct(_HEAD[:3])
"""TOTALSIZE and MAGICCODE: the first 8 bytes of any record, a BLANK included."""
HEAD_TO_SYSFLAG: Final = struct.Struct(_HEAD[:9])
"""TOTALSIZE .. SYSFLAG: enough to tell the layout of a record."""
MAGIC_POSITION: Final = struct.calcsize(_HEAD[:2])  # 4
BODY_CRC_POSITION: Final = SIZE_AND_MAGIC.size  # 8
QUEUE_ID_POSITION: Final = struct.calcsize(_HEAD[:4])  # 12
QUEUE_OFFSET_POSITION: Final = struct.calcsize(_HEAD[:6])  # 20
PHYSICAL_OFFSET_POSITION: Final = struct.calcsize(_HEAD[:7])  # 28
SYSFLAG_POSITION: Final = struct.calcsize(_HEAD[:8])  # 36
BORN_TIMESTAMP_POSITION: Final = struct.calcsize(_HEAD[:9])  # 40
BORN_HOST_POSITION: Final = HEAD_STRUCT.size  # 48


def _host_format(v6: bool) -> str:
    """An address (4 or 16 bytes) and an int port."""
    return "16si" if v6 else "4si"


HOST_V4_SIZE: Final = struct.calcsize(">" + _host_format(False))  # 8
HOST_V6_SIZE: Final = struct.calcsize(">" + _host_format(True))  # 20


def _record_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    """Header from TOTALSIZE up to and including BODY LENGTH, for the given host widths."""
    return struct.Struct(
        _HEAD  # TOTALSIZE .. BORNTIMESTAMP
        + _host_format(born_v6)  # BORNHOST: address + port
        + "q"  # STORETIMESTAMP: ms, the store's clock at the append
        + _host_format(store_v6)  # STOREHOSTADDRESS: address + port
        + "i"  # RECONSUMETIMES
        + "q"  # PREPARED TRANSACTION OFFSET
        + "i"  # BODY LENGTH
    )


RECORD_HEADERS: Final = {
    bits: _record_struct(bool(bits & BORNHOST_V6_FLAG), bool(bits & STOREHOSTADDRESS_V6_FLAG))
    for bits in (0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, HOST_V6_BITS)
}
"""The header of each host-width combination, by ``sys_flag & HOST_V6_BITS``."""
RECORD_HEADER_V4: Final = RECORD_HEADERS[0]  # 88 bytes
"""The header of the common layout: IPv4 born and store hosts."""
FIXED_FIELDS_V4: Final = struct.Struct(
    ">"
    "i"  # TOTALSIZE
    "i"  # MAGICCODE
    "4x"  # BODYCRC, skipped
    "i"  # QUEUEID
    "4x"  # FLAG, skipped
    "q"  # QUEUEOFFSET
    "q"  # PHYSICALOFFSET
    "i"  # SYSFLAG
    "q"  # BORNTIMESTAMP
    "8x"  # BORNHOST, skipped
    "q"  # STORETIMESTAMP
    "Q"  # STOREHOSTADDRESS: address + port as one unsigned number (IPv4 only)
    "i"  # RECONSUMETIMES
    "8x"  # PREPARED TRANSACTION OFFSET, skipped
    "i"  # BODY LENGTH
)
"""RECORD_HEADER_V4 as a reader shows a message: the numbers it shows, the store host as one
number (its 8 bytes, for the msg id), nothing built for the fields it does not show."""
STORE_HOST_POSITION_V4: Final = BORN_HOST_POSITION + HOST_V4_SIZE + 8  # 64
BODY_LENGTH_POSITION_V4: Final = RECORD_HEADER_V4.size - INT_STRUCT.size  # 84
FIXED_OVERHEAD_V4: Final = RECORD_HEADER_V4.size + 1 + 2  # 91: TOPIC and PROPERTIES LENGTH
FIXED_OVERHEAD_V4_V2: Final = FIXED_OVERHEAD_V4 + 1  # 92: a two-byte topic length
HOST_V6_EXTRA: Final = HOST_V6_SIZE - HOST_V4_SIZE
"""What an IPv6 host adds to a record: a 16-byte address instead of 4."""

MIN_RECORD_SIZE: Final = {
    MESSAGE_MAGIC_CODE: FIXED_OVERHEAD_V4,
    MESSAGE_MAGIC_CODE_V2: FIXED_OVERHEAD_V4_V2,
}
"""The smallest record of each format (IPv4 hosts, empty body, topic and properties)."""


def record_header_struct(sys_flag: int) -> struct.Struct:
    """The header layout selected by the host-width bits of ``sys_flag``."""
    return RECORD_HEADERS[sys_flag & HOST_V6_BITS]


def store_timestamp_position(sys_flag: int) -> int:
    """Byte position of STORETIMESTAMP: 56 for an IPv4 born host, 68 for IPv6."""
    return BORN_HOST_POSITION + (HOST_V6_SIZE if sys_flag & BORNHOST_V6_FLAG else HOST_V4_SIZE)


def store_host_position(sys_flag: int) -> int:
    """Byte position of STOREHOSTADDRESS: 64 for an IPv4 born host, 76 for IPv6."""
    return store_timestamp_position(sys_flag) + LONG_STRUCT.size


def topic_length_width(magic: int) -> int:
    """Bytes of TOPIC LENGTH: one in format v1, two (a short) in v2."""
    return 2 if magic == MESSAGE_MAGIC_CODE_V2 else 1


def body_crc(body: bytes | memoryview) -> int:
    """BODYCRC: CRC-32 of the body masked to 31 bits, as RocketMQ's ``UtilAll.crc32``."""
    return zlib.crc32(body) & CRC_MASK


def body_crcs(bodies: list[bytes]) -> list[int]:
    """:func:`body_crc` of each body (one C loop)."""
    return list(map(and_, map(zlib.crc32, bodies), repeat(CRC_MASK)))


HEAD_BYTES: Final = 96
"""Enough bytes from a record's start to reach STORETIMESTAMP of any layout (68 + 8)."""

# --------------------------------------------------------------------------- BLANK

BLANK_STRUCT: Final = struct.Struct(
    ">"
    "i"  # the rest of the file, this filler included
    "i"  # BLANK_MAGIC_CODE
)
END_FILE_MIN_BLANK_LENGTH: Final = BLANK_STRUCT.size  # 8

# --------------------------------------------------------------------------- ConsumeQueue unit

CQ_UNIT_STRUCT: Final = struct.Struct(
    ">"
    "q"  # commit log offset of the record
    "i"  # size of the record; PRE_BLANK_SIZE for a filler unit
    "q"  # tags code (the delivery time for a delayed message)
)
CQ_UNIT_SIZE: Final = CQ_UNIT_STRUCT.size  # 20
PRE_BLANK_SIZE: Final = 0x7FFFFFFF
"""Size field of the filler units that pad a queue's first file when it starts past 0."""


# --------------------------------------------------------------------------- rows


@lru_cache(maxsize=128)
def rows_struct(row: struct.Struct, count: int) -> struct.Struct:
    """``count`` rows of ``row`` back to back, as one struct: a batch's rows packed by one
    call instead of one each. ``row`` has standard sizes (``>``, ``<``, ``!`` or ``=``): no
    padding, so the rows are the bytes of ``row.pack`` of each, joined."""
    order, fields = row.format[0], row.format[1:]
    if order not in "<>!=":
        raise ValueError(f"rows of {row.format!r} would be aligned: give a byte order")
    return struct.Struct(order + fields * count)


def pack_rows(row: struct.Struct, columns: Sequence[Sequence[object]]) -> bytes:
    """``b"".join(map(row.pack, *columns))`` by one ``pack`` (columns of one length, one
    per field of ``row``), the fields interleaved by slice assignment."""
    width = len(columns)
    count = len(columns[0]) if columns else 0
    fields: list[object] = [0] * (width * count)
    for number, column in enumerate(columns):
        fields[number::width] = column
    return rows_struct(row, count).pack(*fields)

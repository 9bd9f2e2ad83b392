"""Where the fields of one record are, found in a single pass over its bytes.

:func:`record_fields` reads the fixed-width numbers with one ``struct`` call and follows the
three length fields (BODY, TOPIC, PROPERTIES) to the positions of the variable ones, without
decoding any of them: a reader that renders a record (the pull path on raw records) takes
the numbers as they are and decodes only the fields it needs, straight from the bytes.
"""

from __future__ import annotations

from typing import NamedTuple

from storage.record.layout import (
    FIXED_FIELDS_V4,
    HOST_V6_BITS,
    INT_STRUCT,
    MESSAGE_MAGIC_CODE,
    RECORD_HEADER_V4,
    SHORT_STRUCT,
    STORE_HOST_POSITION_V4,
    SYSFLAG_POSITION,
    Buffer,
    record_header_struct,
    store_host_position,
    topic_length_width,
)
from storage.record.properties import decode_properties

_unpack_fixed_v4 = FIXED_FIELDS_V4.unpack_from
_unpack_short = SHORT_STRUCT.unpack_from
_HEADER_V4_SIZE = RECORD_HEADER_V4.size
_STORE_HOST_END_V4 = STORE_HOST_POSITION_V4 + 8


class RecordFields(NamedTuple):
    """A record's numbers and the positions (in ``data``) of its variable fields."""

    data: Buffer
    size: int
    queue_id: int
    queue_offset: int
    physical_offset: int
    sys_flag: int
    born_timestamp: int
    store_timestamp: int
    reconsume_times: int
    store_host_at: int  # STOREHOSTADDRESS: address (4 or 16 bytes) + port
    store_host_end: int
    body_at: int
    body_end: int
    topic_at: int
    topic_end: int
    properties_at: int
    properties_end: int

    def body(self) -> bytes:
        return bytes(self.data[self.body_at : self.body_end])

    def topic(self) -> str:
        return str(self.data[self.topic_at : self.topic_end], "utf-8")

    def properties(self) -> dict[str, str]:
        return decode_properties(self.data[self.properties_at : self.properties_end])

    def msg_id(self) -> str:
        """The offsetMsgId: hex of STOREHOSTADDRESS (address + port) and PHYSICALOFFSET."""
        host = bytes(self.data[self.store_host_at : self.store_host_end])
        return host.hex().upper() + f"{self.physical_offset:016X}"


def record_fields(data: Buffer, position: int = 0) -> RecordFields:
    """The fields of the complete, valid record (v1 or v2) at ``position`` of ``data``."""
    (
        size,
        magic,
        _crc,
        queue_id,
        _flag,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        store_timestamp,
        reconsume_times,
        _prepared,
        body_length,
    ) = _unpack_fixed_v4(data, position)
    if sys_flag & HOST_V6_BITS or magic != MESSAGE_MAGIC_CODE:
        return _other_layout_fields(data, position)
    body_at = position + _HEADER_V4_SIZE
    body_end = body_at + body_length
    topic_end = body_end + 1 + data[body_end]
    return RecordFields(
        data,
        size,
        queue_id,
        queue_offset,
        physical_offset,
        sys_flag,
        born_timestamp,
        store_timestamp,
        reconsume_times,
        position + STORE_HOST_POSITION_V4,
        position + _STORE_HOST_END_V4,
        body_at,
        body_end,
        body_end + 1,
        topic_end,
        topic_end + 2,
        topic_end + 2 + _unpack_short(data, topic_end)[0],
    )


def _other_layout_fields(data: Buffer, position: int) -> RecordFields:
    """The fields of a record with an IPv6 host or in format v2 (a two-byte topic length)."""
    sys_flag = INT_STRUCT.unpack_from(data, position + SYSFLAG_POSITION)[0]
    header = record_header_struct(sys_flag)
    fields = header.unpack_from(data, position)
    body_at = position + header.size
    body_end = body_at + fields[16]  # BODY LENGTH
    width = topic_length_width(fields[1])  # MAGICCODE
    topic_length = _unpack_short(data, body_end)[0] if width == 2 else data[body_end]
    topic_at = body_end + width
    topic_end = topic_at + topic_length
    store_host_at = position + store_host_position(sys_flag)
    return RecordFields(
        data,
        fields[0],  # TOTALSIZE
        fields[3],  # QUEUEID
        fields[5],  # QUEUEOFFSET
        fields[6],  # PHYSICALOFFSET
        sys_flag,
        fields[8],  # BORNTIMESTAMP
        fields[11],  # STORETIMESTAMP
        fields[14],  # RECONSUMETIMES
        store_host_at,
        store_host_at + len(fields[12]) + INT_STRUCT.size,  # address + port
        body_at,
        body_end,
        topic_at,
        topic_end,
        topic_end + 2,
        topic_end + 2 + _unpack_short(data, topic_end)[0],
    )

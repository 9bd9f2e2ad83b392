"""Byte layouts of the store: the CommitLog record (RocketMQ formats v1 and v2) and the CQ unit.

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
the same. Reading accepts both (``check_record``, ``decode_record``); writing is v1 only.

ConsumeQueue unit, 20 bytes::

         0    8 commit log offset
         8    4 size
        12    8 tags code             Java String.hashCode of TAGS (delivery time for delays)
"""

from __future__ import annotations

import array
import ipaddress
import mmap
import operator
import struct
import sys
import zlib
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Final

from storage.errors import (
    InvalidTopicError,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from storage.topic_names import MAX_TOPIC_LENGTH, TOPIC_PATTERN

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""Anything records are read from or packed into."""

MESSAGE_MAGIC_CODE: Final = -626843481  # 0xDAA320A7
MESSAGE_MAGIC_CODE_V2: Final = -626843477  # 0xDAA320AB (two-byte topic length)
MESSAGE_MAGIC_CODES: Final = frozenset((MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2))
"""The magic codes of a message record, v1 and v2."""
BLANK_MAGIC_CODE: Final = -875286124  # 0xCBD43194
END_FILE_MIN_BLANK_LENGTH: Final = 8
BLANK_STRUCT: Final = struct.Struct(">ii")

CRC_MASK: Final = 0x7FFFFFFF
MAX_PROPERTIES_LENGTH: Final = 32767

NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

# sysFlag bits (MessageSysFlag).
COMPRESSED_FLAG: Final = 0x1
MULTI_TAGS_FLAG: Final = 0x2
TRANSACTION_TYPE_MASK: Final = 0xC
TRANSACTION_NOT_TYPE: Final = 0x0
TRANSACTION_PREPARED_TYPE: Final = 0x4
TRANSACTION_COMMIT_TYPE: Final = 0x8
TRANSACTION_ROLLBACK_TYPE: Final = 0xC
BORNHOST_V6_FLAG: Final = 0x10
STOREHOSTADDRESS_V6_FLAG: Final = 0x20

# Property names (MessageConst).
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_DELAY: Final = "DELAY"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QID: Final = "REAL_QID"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
# Idempotent produce (beyond RocketMQ): the key a send was made with, and on the first record
# of a keyed send the fingerprint of its payload and, for a batch, how many records it holds.
PROPERTY_IDEMPOTENCY_KEY: Final = "IDEMPOTENCY_KEY"
PROPERTY_IDEMPOTENCY_FINGERPRINT: Final = "IDEMPOTENCY_FP"
PROPERTY_IDEMPOTENCY_BATCH: Final = "IDEMPOTENCY_BATCH"
KEY_SEPARATOR: Final = " "

# Everything before the born host: TOTALSIZE .. BORNTIMESTAMP.
_HEAD = ">iiiiiqqiq"
HEAD_STRUCT: Final = struct.Struct(_HEAD)
QUEUE_OFFSET_POSITION: Final = struct.calcsize(">iiiii")  # 20
PHYSICAL_OFFSET_POSITION: Final = QUEUE_OFFSET_POSITION + 8  # 28
SYSFLAG_POSITION: Final = PHYSICAL_OFFSET_POSITION + 8  # 36
BORN_HOST_POSITION: Final = HEAD_STRUCT.size  # 48

CQ_UNIT_STRUCT: Final = struct.Struct(">qiq")
CQ_UNIT_SIZE: Final = CQ_UNIT_STRUCT.size  # 20


def _host_format(v6: bool) -> str:
    return "16si" if v6 else "4si"


def _record_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    """Header from TOTALSIZE up to and including BODY LENGTH, for the given host widths."""
    return struct.Struct(
        _HEAD  # TOTALSIZE .. BORNTIMESTAMP
        + _host_format(born_v6)  # BORNHOST
        + "q"  # STORETIMESTAMP
        + _host_format(store_v6)  # STOREHOSTADDRESS
        + "i"  # RECONSUMETIMES
        + "q"  # PREPARED TRANSACTION OFFSET
        + "i"  # BODY LENGTH
    )


_RECORD_STRUCTS: Final = {
    (born, store): _record_struct(born, store) for born in (False, True) for store in (False, True)
}
RECORD_HEADER_V4: Final = _RECORD_STRUCTS[(False, False)]  # 88 bytes
FIXED_OVERHEAD_V4: Final = RECORD_HEADER_V4.size + 1 + 2  # 91
FIXED_OVERHEAD_V4_V2: Final = FIXED_OVERHEAD_V4 + 1  # 92: a two-byte topic length


_HOST_V6_BITS: Final = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_HEADER_BY_HOST_BITS: Final = {
    bits: _RECORD_STRUCTS[(bool(bits & BORNHOST_V6_FLAG), bool(bits & STOREHOSTADDRESS_V6_FLAG))]
    for bits in (0, BORNHOST_V6_FLAG, STOREHOSTADDRESS_V6_FLAG, _HOST_V6_BITS)
}


def record_header_struct(sys_flag: int) -> struct.Struct:
    """The header layout selected by the host-width bits of ``sys_flag``."""
    return _HEADER_BY_HOST_BITS[sys_flag & _HOST_V6_BITS]


def store_timestamp_position(sys_flag: int) -> int:
    """Byte position of STORETIMESTAMP: 56 for an IPv4 born host, 68 for IPv6."""
    return BORN_HOST_POSITION + (20 if sys_flag & BORNHOST_V6_FLAG else 8)


# --------------------------------------------------------------------------- hashes, CRC


def body_crc(body: bytes) -> int:
    """CRC-32 of the body masked to 31 bits, as RocketMQ's ``UtilAll.crc32``."""
    return zlib.crc32(body) & CRC_MASK


_MAX_FAST_HASH_LENGTH: Final = 1024


@lru_cache(maxsize=256)
def _hash_powers(length: int) -> tuple[int, ...]:
    """``31**(length-1-i) mod 2**32`` for each position ``i``."""
    return tuple(pow(31, length - 1 - i, 1 << 32) for i in range(length))


@lru_cache(maxsize=8192)
def java_string_hash(value: str) -> int:
    """Java ``String.hashCode``: ``h = 31*h + c`` over UTF-16 code units, as a signed int32.

    Computed as ``sum(c[i] * 31**(n-1-i)) mod 2**32`` so the loop runs in C: index keys
    are unique per message, so the cache rarely helps them.

    >>> java_string_hash("TAG1"), java_string_hash("TagA")
    (2567159, 2598919)
    """
    units: bytes | array.array[int]
    if value.isascii():
        units = value.encode()
    else:
        units = array.array(
            "H", value.encode("utf-16-le" if sys.byteorder == "little" else "utf-16-be")
        )
    if len(units) > _MAX_FAST_HASH_LENGTH:
        h = 0
        for unit in units:
            h = (31 * h + unit) & 0xFFFFFFFF
    else:
        h = sum(map(operator.mul, units, _hash_powers(len(units)))) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


_POWERS_OF_31: Final = tuple(pow(31, n, 1 << 32) for n in range(_MAX_FAST_HASH_LENGTH + 1))


def java_string_hash_after(prefix_hash: int, value: str) -> int:
    """``java_string_hash(prefix + value)`` from the prefix's hash, hashing ``value`` only.

    Java's hash is linear: ``h(p + v) = h(p) * 31**len(v) + h(v)`` (mod 2**32), so a
    remembered prefix (an index key's ``topic#``) is not hashed again. Uncached: the
    values (index keys) are nearly always new.
    """
    if not value.isascii() or len(value) > _MAX_FAST_HASH_LENGTH:
        h = prefix_hash * pow(31, _utf16_length(value), 1 << 32) + java_string_hash(value)
    else:
        units = value.encode()
        length = len(units)
        h = prefix_hash * _POWERS_OF_31[length] + sum(
            map(operator.mul, units, _hash_powers(length))
        )
    h &= 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def _utf16_length(value: str) -> int:
    return len(value.encode("utf-16-le")) // 2


def tags_code(tags: str | None) -> int:
    """The ConsumeQueue tags code of a TAGS value: its Java hash, 0 when there is no tag."""
    if not tags:
        return 0
    return java_string_hash(tags)


def to_int32(value: int) -> int:
    """The low 32 bits of ``value`` as a signed int (how filters compare a tags code)."""
    value &= 0xFFFFFFFF
    return value - 0x100000000 if value & 0x80000000 else value


# --------------------------------------------------------------------------- properties


def encode_properties(properties: dict[str, str]) -> bytes:
    """``name\\x01value\\x02`` per entry, with the trailing separator (RocketMQ ≤ 4.9.0, ≥ 5.2)."""
    text = ""
    for name, value in properties.items():  # a plain loop: faster than join for a few entries
        if value is not None:
            text += f"{name}\x01{value}\x02"
    return text.encode()


def decode_properties(data: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """Parse properties; tolerates a missing trailing separator, drops empty names and values."""
    text = data if isinstance(data, str) else str(data, "utf-8", "replace")
    result: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        name, _, value = segment.partition(NAME_VALUE_SEPARATOR)
        if value and name:  # a value is only found after a separator
            result[name] = value
    return result


# --------------------------------------------------------------------------- hosts and ids


@lru_cache(maxsize=256)
def encode_host(host: str) -> bytes:
    """The 4 or 16 address bytes of an IP literal."""
    return ipaddress.ip_address(host).packed


_HOST_NAMES: dict[bytes, str] = {}


def decode_host(address: bytes) -> str:
    """The IP literal of 4 or 16 address bytes (memoised: a store sees few distinct hosts)."""
    name = _HOST_NAMES.get(address)
    if name is None:
        name = str(ipaddress.ip_address(address))
        if len(_HOST_NAMES) < 4096:
            _HOST_NAMES[address] = name
    return name


@lru_cache(maxsize=256)
def msg_id_prefix(store_host: str, store_port: int) -> str:
    """The part of every offsetMsgId of one store before the offset: address + port, hex.

    A msgId is this prefix followed by the physical offset as 16 uppercase hex digits
    (``prefix + f"{offset:016X}"``), which is how :func:`encode_msg_id` builds it.

    >>> msg_id_prefix("127.0.0.1", 10911)
    '7F00000100002A9F'
    """
    return (encode_host(store_host) + struct.pack(">i", store_port)).hex().upper()


def encode_msg_id(store_host: str, store_port: int, physical_offset: int) -> str:
    """RocketMQ's offsetMsgId: hex of store address + port + physical offset, uppercase.

    >>> encode_msg_id("127.0.0.1", 10911, 0)
    '7F00000100002A9F0000000000000000'
    """
    if not _INT64_MIN <= physical_offset <= _INT64_MAX:
        raise ValueError(f"a physical offset is a long, not {physical_offset}")
    # A negative long as its two's complement, as Java (and struct ">q") write it.
    return msg_id_prefix(store_host, store_port) + f"{physical_offset & _UINT64_MASK:016X}"


@dataclass(frozen=True, slots=True)
class MessageId:
    """A decoded offsetMsgId."""

    store_host: str
    store_port: int
    physical_offset: int


def decode_msg_id(msg_id: str) -> MessageId:
    """Decode an offsetMsgId (32 hex chars for IPv4, 56 for IPv6); ``ValueError`` if malformed."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"a message id has 32 or 56 hex characters, not {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    if len(raw) * 2 != len(msg_id):  # fromhex skips whitespace
        raise ValueError("a message id has hex digits only")
    address_length = 4 if len(raw) == 16 else 16
    port, offset = struct.unpack_from(">iq", raw, address_length)
    return MessageId(decode_host(raw[:address_length]), port, offset)


# --------------------------------------------------------------------------- validation


@lru_cache(maxsize=4096)
def _checked_topic(topic: str) -> tuple[bytes, bytes]:
    """The topic's UTF-8 bytes and its TOPIC LENGTH (one byte, v1) + TOPIC field.

    ``InvalidTopicError`` if the name is not valid (errors are not cached).
    """
    topic_bytes = validate_topic(topic)
    return topic_bytes, bytes((len(topic_bytes),)) + topic_bytes


@lru_cache(maxsize=4096)
def validate_topic(topic: str) -> bytes:
    """Check a topic name and return its UTF-8 bytes; ``InvalidTopicError`` if it is not valid."""
    # fullmatch, not match: ``$`` also matches before a trailing newline ("abc\n").
    if not topic or len(topic) > MAX_TOPIC_LENGTH or not TOPIC_PATTERN.fullmatch(topic):
        raise InvalidTopicError(
            f"invalid topic name {topic[:140]!r}: use 1 to {MAX_TOPIC_LENGTH} characters "
            "from a-z A-Z 0-9 _ - % |"
        )
    return topic.encode()


# --------------------------------------------------------------------------- messages in


@dataclass(slots=True)
class Message:
    """A message to append, as the producer gives it."""

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MASK = 2**64 - 1


OUT_OF_RANGE: Final = (
    "a numeric field is out of range: flag, sys_flag, reconsume_times and the born port are "
    "32-bit, born_timestamp and the transaction offset 64-bit"
)


def check_numbers(message: Message) -> None:
    """Every integer field fits its width (batches check this before writing anything; a
    single put learns it from ``struct`` before its write position moves)."""
    if not (
        _INT32_MIN <= message.flag <= _INT32_MAX
        and _INT32_MIN <= message.sys_flag <= _INT32_MAX
        and _INT32_MIN <= message.reconsume_times <= _INT32_MAX
        and _INT32_MIN <= message.born_host[1] <= _INT32_MAX
        and _INT64_MIN <= message.born_timestamp <= _INT64_MAX
        and _INT64_MIN <= message.prepared_transaction_offset <= _INT64_MAX
    ):
        raise MessageRejectedError(OUT_OF_RANGE)


class EncodedMessage:
    """A message checked and encoded outside the put path; only offsets and time remain.

    ``write_into`` packs the whole record into a buffer in one go, filling in the queue
    offset, physical offset and store time that are known only inside the append.
    """

    __slots__ = (
        "body",
        "born_address",
        "born_port",
        "born_timestamp",
        "crc",
        "flag",
        "idempotency_key",
        "keys",
        "prepared_transaction_offset",
        "properties",
        "properties_bytes",
        "queue_id",
        "reconsume_times",
        "size",
        "struct",
        "sys_flag",
        "tags_code",
        "tail",
        "topic",
        "topic_bytes",
        "uniq_key",
    )

    def __init__(self, message: Message, store_v6: bool, max_body_size: int) -> None:
        body = message.body
        body_length = len(body)
        if body_length > max_body_size:
            raise MessageTooLargeError(
                f"message body is {body_length} bytes, over the limit of {max_body_size}"
            )
        topic = message.topic
        topic_bytes, topic_field = _checked_topic(topic)
        properties = message.properties
        properties_bytes = _properties_field(properties)
        born_host, born_port = message.born_host
        born_address = encode_host(born_host)
        sys_flag = message.sys_flag & ~_HOST_V6_BITS
        if len(born_address) == 16:
            sys_flag |= BORNHOST_V6_FLAG
        if store_v6:
            sys_flag |= STOREHOSTADDRESS_V6_FLAG
        header = _HEADER_BY_HOST_BITS[sys_flag & _HOST_V6_BITS]
        tags = properties.get(PROPERTY_TAGS)
        # Plain locals first, attributes once: this runs for every message put.
        self.topic = topic
        self.topic_bytes = topic_bytes
        self.properties = properties
        self.properties_bytes = properties_bytes
        self.sys_flag = sys_flag
        self.struct = header
        self.body = body
        self.crc = zlib.crc32(body) & CRC_MASK
        self.queue_id = message.queue_id
        self.flag = message.flag
        self.born_timestamp = message.born_timestamp
        self.born_address = born_address
        self.born_port = born_port
        self.reconsume_times = message.reconsume_times
        self.prepared_transaction_offset = message.prepared_transaction_offset
        self.tags_code = java_string_hash(tags) if tags else 0  # = tags_code(tags)
        self.keys = properties.get(PROPERTY_KEYS)
        self.uniq_key = properties.get(PROPERTY_UNIQ_KEY)
        self.idempotency_key = properties.get(PROPERTY_IDEMPOTENCY_KEY)
        self.size = header.size + body_length + 3 + len(topic_bytes) + len(properties_bytes)
        # Everything after the body, ready to copy: TOPIC LENGTH + TOPIC + PROPERTIES LENGTH
        # + PROPERTIES.
        self.tail = b"".join((topic_field, _SHORT.pack(len(properties_bytes)), properties_bytes))

    @property
    def is_dispatchable(self) -> bool:
        """Prepared and rolled-back transaction messages never reach a ConsumeQueue."""
        kind = self.sys_flag & TRANSACTION_TYPE_MASK
        return kind in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)

    def write_into(
        self,
        buffer: bytearray | memoryview | mmap.mmap,
        position: int,
        queue_offset: int,
        physical_offset: int,
        store_timestamp: int,
        store_address: bytes,
        store_port: int,
    ) -> None:
        """Pack the full record at ``position`` of ``buffer``."""
        body = self.body
        self.struct.pack_into(
            buffer,
            position,
            self.size,
            MESSAGE_MAGIC_CODE,
            self.crc,
            self.queue_id,
            self.flag,
            queue_offset,
            physical_offset,
            self.sys_flag,
            self.born_timestamp,
            self.born_address,
            self.born_port,
            store_timestamp,
            store_address,
            store_port,
            self.reconsume_times,
            self.prepared_transaction_offset,
            len(body),
        )
        p = position + self.struct.size
        end = p + len(body)
        buffer[p:end] = body
        buffer[end : position + self.size] = self.tail


def _properties_field(properties: dict[str, str]) -> bytes:
    """The encoded properties, refused when not valid Unicode or over the length limit."""
    try:
        properties_bytes = encode_properties(properties)
    except UnicodeEncodeError as exc:  # e.g. a lone surrogate ("\ud800" in JSON)
        raise MessageRejectedError(
            f"message properties are not valid Unicode: {exc.reason}"
        ) from None
    if len(properties_bytes) > MAX_PROPERTIES_LENGTH:
        raise PropertiesTooLargeError(
            f"message properties are {len(properties_bytes)} bytes encoded, "
            f"over the limit of {MAX_PROPERTIES_LENGTH}"
        )
    return properties_bytes


def check_batch(messages: list[Message]) -> None:
    """A batch is all or nothing: refuse it before anything is encoded or written.

    One topic and queue, no delay, no transaction halves, every number within its width.
    """
    first = messages[0]
    topic, queue_id = first.topic, first.queue_id
    for message in messages:
        properties = message.properties
        if PROPERTY_DELAY in properties and _delay_level(properties[PROPERTY_DELAY]) > 0:
            raise MessageRejectedError(
                "a batch cannot be delayed; send delayed messages one by one"
            )
        # RocketMQ answers MESSAGE_ILLEGAL too (reference §2.9): a prepared message would
        # take a queue offset that is never dispatched, leaving a hole in the ConsumeQueue.
        if message.sys_flag & TRANSACTION_TYPE_MASK:
            raise MessageRejectedError("a batch cannot hold transactional messages")
        if message.topic != topic or message.queue_id != queue_id:
            raise MessageRejectedError(
                "every message of a batch must have the same topic and queue"
            )
        check_numbers(message)


def _delay_level(value: str) -> int:
    try:
        return int(value or 0)
    except ValueError:
        raise MessageRejectedError("DELAY must be a delay level (an integer)") from None


class EncodedBatch:
    """A checked batch of one (topic, queue) encoded as one object: no object per record.

    Everything a record needs but its offsets and store time is computed here, in one loop,
    into plain lists; :meth:`pack` then lays every record out with one ``struct`` call and
    one ``join`` for the batch, and packs the batch's ConsumeQueue units alongside. All
    records of a batch are dispatchable (``check_batch`` refuses transaction halves), so
    their queue offsets are consecutive.
    """

    __slots__ = (
        "count",
        "idempotency_keys",
        "keys",
        "queue_id",
        "records",
        "size",
        "sizes",
        "tags_codes",
        "topic",
        "uniq_keys",
    )

    def __init__(self, messages: list[Message], store_v6: bool, max_body_size: int) -> None:
        first = messages[0]
        topic = first.topic
        _, topic_field = _checked_topic(topic)
        topic_length = len(topic_field) - 1
        store_bit = STOREHOSTADDRESS_V6_FLAG if store_v6 else 0
        records = []
        sizes = []
        tags_codes = []
        keys = []
        uniq_keys = []
        idempotency_keys: list[tuple[int, str]] = []  # (record number, key): few or none
        total = 0
        for message in messages:
            body = message.body
            body_length = len(body)
            if body_length > max_body_size:
                raise MessageTooLargeError(
                    f"message body is {body_length} bytes, over the limit of {max_body_size}"
                )
            properties = message.properties
            properties_bytes = _properties_field(properties)
            born_host, born_port = message.born_host
            born_address = encode_host(born_host)
            sys_flag = (message.sys_flag & ~_HOST_V6_BITS) | store_bit
            if len(born_address) == 16:
                sys_flag |= BORNHOST_V6_FLAG
            header = _HEADER_BY_HOST_BITS[sys_flag & _HOST_V6_BITS]
            size = header.size + body_length + 3 + topic_length + len(properties_bytes)
            tags = properties.get(PROPERTY_TAGS)
            records.append(
                (
                    header.pack,
                    size,
                    zlib.crc32(body) & CRC_MASK,
                    message.flag,
                    sys_flag,
                    message.born_timestamp,
                    born_address,
                    born_port,
                    message.reconsume_times,
                    message.prepared_transaction_offset,
                    body,
                    topic_field + _SHORT.pack(len(properties_bytes)) + properties_bytes,
                )
            )
            sizes.append(size)
            tags_codes.append(java_string_hash(tags) if tags else 0)
            keys.append(properties.get(PROPERTY_KEYS))
            uniq_keys.append(properties.get(PROPERTY_UNIQ_KEY))
            idempotency_key = properties.get(PROPERTY_IDEMPOTENCY_KEY)
            if idempotency_key is not None:
                idempotency_keys.append((len(sizes) - 1, idempotency_key))
            total += size
        self.topic = topic
        self.queue_id = first.queue_id
        self.count = len(records)
        self.records = records
        self.size = total
        self.sizes = sizes
        self.tags_codes = tags_codes
        self.keys = keys
        self.uniq_keys = uniq_keys
        self.idempotency_keys = idempotency_keys

    def pack(
        self,
        physical_offset: int,
        queue_offset: int,
        store_timestamp: int,
        store_address: bytes,
        store_port: int,
    ) -> tuple[bytes, bytes, list[int]]:
        """The records laid out from ``physical_offset``, their ConsumeQueue units and their
        physical offsets. ``struct.error`` when a number does not fit its field."""
        queue_id = self.queue_id
        parts: list[bytes] = []
        extend = parts.extend
        units: list[bytes] = []
        add_unit = units.append
        pack_unit = CQ_UNIT_STRUCT.pack
        offsets: list[int] = []
        add_offset = offsets.append
        offset = physical_offset
        for record, tags_code in zip(self.records, self.tags_codes, strict=True):
            (
                pack,
                size,
                crc,
                flag,
                sys_flag,
                born,
                address,
                port,
                reconsume,
                prepared,
                body,
                tail,
            ) = record
            extend(
                (
                    pack(
                        size,
                        MESSAGE_MAGIC_CODE,
                        crc,
                        queue_id,
                        flag,
                        queue_offset,
                        offset,
                        sys_flag,
                        born,
                        address,
                        port,
                        store_timestamp,
                        store_address,
                        store_port,
                        reconsume,
                        prepared,
                        len(body),
                    ),
                    body,
                    tail,
                )
            )
            add_unit(pack_unit(offset, size, tags_code))
            add_offset(offset)
            offset += size
            queue_offset += 1
        return b"".join(parts), b"".join(units), offsets


def encode_message(
    message: Message,
    queue_offset: int = 0,
    physical_offset: int = 0,
    store_timestamp: int = 0,
    store_host: tuple[str, int] = ("127.0.0.1", 10911),
    max_body_size: int = 4 * 1024 * 1024,
) -> bytes:
    """Encode one complete record (a convenience for tests and tools)."""
    store_address = encode_host(store_host[0])
    encoded = EncodedMessage(message, len(store_address) == 16, max_body_size)
    buffer = bytearray(encoded.size)
    encoded.write_into(
        buffer, 0, queue_offset, physical_offset, store_timestamp, store_address, store_host[1]
    )
    return bytes(buffer)


# --------------------------------------------------------------------------- records out


@dataclass(slots=True)
class StoredMessage:
    """A record decoded from the CommitLog; treat it as read-only.

    Not ``frozen``: a frozen dataclass sets each of these 16 fields through
    ``object.__setattr__``, which costs about 1.5 µs per message on the pull path — more
    than the rest of decoding a record.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    body: bytes
    properties: dict[str, str]
    flag: int
    sys_flag: int
    body_crc: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_transaction_offset: int

    @property
    def msg_id(self) -> str:
        """The offsetMsgId: the store's :func:`msg_id_prefix` + the offset in 16 hex digits."""
        host, port = self.store_host
        return msg_id_prefix(host, port) + f"{self.physical_offset:016X}"

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROPERTY_TAGS)

    @property
    def keys(self) -> list[str]:
        return [k for k in self.properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k]

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(PROPERTY_UNIQ_KEY)


class RecordKind(Enum):
    """What a scan finds at a position of the CommitLog."""

    MESSAGE = "message"  # a complete, valid record
    BLANK = "blank"  # end-of-file filler: go to the next file
    END = "end"  # zero magic or a short tail: the end of written data
    CORRUPT = "corrupt"  # impossible length, unknown magic or CRC mismatch


@dataclass(frozen=True, slots=True)
class RecordCheck:
    """The outcome of checking one record: its kind, size and, for messages, a reason-free view."""

    kind: RecordKind
    size: int
    reason: str = ""


_MAGIC_AT = struct.Struct(">ii")
_INT = struct.Struct(">i")
_SHORT = struct.Struct(">h")


def _layout_end(buffer: Buffer, position: int, limit: int, magic: int) -> int | None:
    """Where the record at ``position`` ends according to its own field lengths, or None."""
    if position + BORN_HOST_POSITION > limit:
        return None
    sys_flag = _INT.unpack_from(buffer, position + SYSFLAG_POSITION)[0]
    header = record_header_struct(sys_flag)
    p = position + header.size
    if p > limit:
        return None
    body_length = _INT.unpack_from(buffer, p - 4)[0]
    if body_length < 0:
        return -1
    p += body_length
    if magic == MESSAGE_MAGIC_CODE_V2:
        if p + 2 > limit:
            return None
        p += 2 + _SHORT.unpack_from(buffer, p)[0]
    else:
        if p + 1 > limit:
            return None
        p += 1 + buffer[p]
    if p + 2 > limit:
        return None
    properties_length = _SHORT.unpack_from(buffer, p)[0]
    if properties_length < 0:
        return -1
    return int(p + 2 + properties_length)


def check_record(buffer: Buffer, position: int, limit: int, check_crc: bool) -> RecordCheck:
    """Check the record at ``position``; ``limit`` is the end of readable data in ``buffer``.

    A short tail or a zero magic is the normal end of the log (END); only an impossible
    length, an unknown magic or a CRC mismatch is CORRUPT.
    """
    if position + 8 > limit:
        return RecordCheck(RecordKind.END, 0)
    total_size, magic = _MAGIC_AT.unpack_from(buffer, position)
    if magic == BLANK_MAGIC_CODE:
        return RecordCheck(RecordKind.BLANK, 0)
    if magic == 0 and total_size == 0:
        return RecordCheck(RecordKind.END, 0)
    if magic not in MESSAGE_MAGIC_CODES:
        return RecordCheck(RecordKind.CORRUPT, 0, f"unknown magic code {magic & 0xFFFFFFFF:#010x}")
    if total_size < (FIXED_OVERHEAD_V4 if magic == MESSAGE_MAGIC_CODE else FIXED_OVERHEAD_V4_V2):
        return RecordCheck(RecordKind.CORRUPT, 0, f"impossible record size {total_size}")
    if position + total_size > limit:
        return RecordCheck(RecordKind.END, 0, "record is cut short")
    end = _layout_end(buffer, position, position + total_size, magic)
    if end != position + total_size:
        return RecordCheck(
            RecordKind.CORRUPT, total_size, f"TOTALSIZE {total_size} does not match the fields"
        )
    if check_crc:
        stored = _INT.unpack_from(buffer, position + 8)[0]
        sys_flag = _INT.unpack_from(buffer, position + SYSFLAG_POSITION)[0]
        header = record_header_struct(sys_flag)
        body_length = _INT.unpack_from(buffer, position + header.size - 4)[0]
        start = position + header.size
        crc = zlib.crc32(buffer[start : start + body_length]) & CRC_MASK
        if crc != stored:
            return RecordCheck(RecordKind.CORRUPT, total_size, "body CRC mismatch")
    return RecordCheck(RecordKind.MESSAGE, total_size)


def decode_record(buffer: Buffer, position: int = 0) -> StoredMessage:
    """Decode the complete, valid record (v1 or v2) at ``position``."""
    header = RECORD_HEADER_V4
    fields = header.unpack_from(buffer, position)
    # The pull path's common case -- v1, IPv4 hosts -- pays one test for both exceptions.
    if fields[7] & _HOST_V6_BITS or fields[1] != -626843481:  # MESSAGE_MAGIC_CODE
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
    properties_end = topic_end + 2 + _SHORT.unpack_from(buffer, topic_end)[0]
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
        (_HOST_NAMES.get(born_address) or decode_host(born_address), born_port),
        store_timestamp,
        (_HOST_NAMES.get(store_address) or decode_host(store_address), store_port),
        reconsume_times,
        prepared_offset,
    )


def _decode_other_layout(buffer: Buffer, position: int) -> StoredMessage:
    """Decode a record with an IPv6 host or in format v2 (a two-byte topic length)."""
    header = record_header_struct(_INT.unpack_from(buffer, position + SYSFLAG_POSITION)[0])
    fields = header.unpack_from(buffer, position)
    body_end = position + header.size + fields[16]
    body = bytes(buffer[position + header.size : body_end])
    if fields[1] == MESSAGE_MAGIC_CODE_V2:
        topic_at = body_end + 2
        topic_end = topic_at + _SHORT.unpack_from(buffer, body_end)[0]
    else:
        topic_at = body_end + 1
        topic_end = topic_at + buffer[body_end]
    properties_end = topic_end + 2 + _SHORT.unpack_from(buffer, topic_end)[0]
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
    sys_flag = _INT.unpack_from(buffer, position + SYSFLAG_POSITION)[0]
    return int(struct.unpack_from(">q", buffer, position + store_timestamp_position(sys_flag))[0])


def blank_record(remaining: int) -> bytes:
    """The 8-byte end-of-file filler."""
    return BLANK_STRUCT.pack(remaining, BLANK_MAGIC_CODE)

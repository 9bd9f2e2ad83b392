"""Encoding records: a message checked and laid out in RocketMQ's format v1.

Everything a record needs but its offsets and store time is computed outside the put path:
:class:`EncodedMessage` for one message, :class:`EncodedBatch` for a batch of one (topic,
queue). The append fills in the queue offset, physical offset and store time. A message is
refused (``MessageRejectedError`` and its subclasses) before anything is written.
"""

from __future__ import annotations

import mmap
import zlib
from functools import lru_cache
from typing import Final

from storage.errors import MessageRejectedError, MessageTooLargeError, PropertiesTooLargeError
from storage.record.java_hash import java_string_hash
from storage.record.layout import (
    BLANK_MAGIC_CODE,
    BLANK_STRUCT,
    BORNHOST_V6_FLAG,
    CQ_UNIT_STRUCT,
    CRC_MASK,
    DISPATCHABLE_TYPES,
    HOST_V6_BITS,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    MESSAGE_MAGIC_CODE,
    RECORD_HEADERS,
    SHORT_STRUCT,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_TYPE_MASK,
)
from storage.record.message import Message
from storage.record.msg_id import encode_host
from storage.record.properties import (
    MAX_PROPERTIES_LENGTH,
    PROPERTY_DELAY,
    PROPERTY_IDEMPOTENCY_KEY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    encode_properties,
)
from storage.topic_names import check_topic

OUT_OF_RANGE: Final = (
    "a numeric field is out of range: flag, sys_flag, reconsume_times and the born port are "
    "32-bit, born_timestamp and the transaction offset 64-bit"
)


def check_numbers(message: Message) -> None:
    """Every integer field fits its width (batches check this before writing anything; a
    single put learns it from ``struct`` before its write position moves)."""
    if not (
        INT32_MIN <= message.flag <= INT32_MAX
        and INT32_MIN <= message.sys_flag <= INT32_MAX
        and INT32_MIN <= message.reconsume_times <= INT32_MAX
        and INT32_MIN <= message.born_host[1] <= INT32_MAX
        and INT64_MIN <= message.born_timestamp <= INT64_MAX
        and INT64_MIN <= message.prepared_transaction_offset <= INT64_MAX
    ):
        raise MessageRejectedError(OUT_OF_RANGE)


@lru_cache(maxsize=4096)
def topic_field(topic: str) -> bytes:
    """TOPIC LENGTH (one byte, v1) + TOPIC of a valid topic name.

    ``InvalidTopicError`` if the name is not valid (errors are not cached).
    """
    topic_bytes = check_topic(topic).encode()
    return bytes((len(topic_bytes),)) + topic_bytes


@lru_cache(maxsize=1024)
def host_address(host: str) -> bytes:
    """The address bytes of an IP literal (:func:`encode_host`), remembered: a store hears
    from few hosts, and every message names one."""
    return encode_host(host)


def _body_too_large(length: int, max_body_size: int) -> MessageTooLargeError:
    return MessageTooLargeError(
        f"message body is {length} bytes, over the limit of {max_body_size}"
    )


def properties_field(properties: dict[str, str]) -> bytes:
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
        "queue_id",
        "reconsume_times",
        "size",
        "struct",
        "sys_flag",
        "tags_code",
        "tail",
        "topic",
        "uniq_key",
    )

    def __init__(self, message: Message, store_v6: bool, max_body_size: int) -> None:
        body = message.body
        if len(body) > max_body_size:
            raise _body_too_large(len(body), max_body_size)
        topic = message.topic
        topic_bytes = topic_field(topic)
        properties = message.properties
        properties_bytes = properties_field(properties)
        born_host, born_port = message.born_host
        born_address = host_address(born_host)
        sys_flag = message.sys_flag & ~HOST_V6_BITS
        if len(born_address) == 16:
            sys_flag |= BORNHOST_V6_FLAG
        if store_v6:
            sys_flag |= STOREHOSTADDRESS_V6_FLAG
        header = RECORD_HEADERS[sys_flag & HOST_V6_BITS]
        tags = properties.get(PROPERTY_TAGS)
        # Plain locals first, attributes once: this runs for every message put.
        self.topic = topic
        self.properties = properties
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
        self.size = header.size + len(body) + len(topic_bytes) + 2 + len(properties_bytes)
        # Everything after the body, ready to copy: TOPIC LENGTH + TOPIC + PROPERTIES LENGTH
        # + PROPERTIES.
        self.tail = b"".join(
            (topic_bytes, SHORT_STRUCT.pack(len(properties_bytes)), properties_bytes)
        )

    @property
    def is_dispatchable(self) -> bool:
        """Prepared and rolled-back transaction messages never reach a ConsumeQueue."""
        return self.sys_flag & TRANSACTION_TYPE_MASK in DISPATCHABLE_TYPES  # is_dispatchable

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
        topic_bytes = topic_field(topic)
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
            if len(body) > max_body_size:
                raise _body_too_large(len(body), max_body_size)
            properties = message.properties
            properties_bytes = properties_field(properties)
            born_host, born_port = message.born_host
            born_address = host_address(born_host)
            sys_flag = (message.sys_flag & ~HOST_V6_BITS) | store_bit
            if len(born_address) == 16:
                sys_flag |= BORNHOST_V6_FLAG
            header = RECORD_HEADERS[sys_flag & HOST_V6_BITS]
            size = header.size + len(body) + len(topic_bytes) + 2 + len(properties_bytes)
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
                    topic_bytes + SHORT_STRUCT.pack(len(properties_bytes)) + properties_bytes,
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


def blank_record(remaining: int) -> bytes:
    """The 8-byte end-of-file filler."""
    return BLANK_STRUCT.pack(remaining, BLANK_MAGIC_CODE)

"""The golden record: one message written out by hand from reference §2.2 (format v1) and
§2.1-2.2 (format v2), and the helpers the record tests share."""

from __future__ import annotations

import ipaddress
import mmap
import struct
from typing import Any

import pytest

from storage.record.encode import EncodedBatch, encode_message
from storage.record.fields import NamedView
from storage.record.layout import MESSAGE_MAGIC_CODE_V2
from storage.record.message import Message, StoredMessage
from storage.record.properties import shown_properties

BODY = bytes(range(32))


def in_mmap(data: bytes) -> mmap.mmap:
    buffer = mmap.mmap(-1, len(data))
    buffer[:] = data
    return buffer


KEYS = "1234567890123"  # 13 digits
PROPERTIES_BYTES = b"TAGS\x01TAG1\x02KEYS\x011234567890123\x02"


def golden_message(**overrides: Any) -> Message:
    fields: dict[str, Any] = {
        "topic": "FooBar",
        "body": BODY,
        "queue_id": 3,
        "properties": {"TAGS": "TAG1", "KEYS": KEYS},
        "flag": 7,
        "born_timestamp": 1111,
        "born_host": ("10.0.0.1", 5555),
        "reconsume_times": 2,
        "prepared_transaction_offset": 0,
    }
    fields.update(overrides)
    return Message(**fields)


def golden_record(
    born_host: tuple[str, int] = ("10.0.0.1", 5555),
    store_host: tuple[str, int] = ("192.168.1.2", 10911),
) -> bytes:
    return encode_message(
        golden_message(born_host=born_host),
        queue_offset=42,
        physical_offset=4096,
        store_timestamp=2222,
        store_host=store_host,
    )


# The golden record, written out by hand from reference §2.2 (IPv4 born and store hosts).
GOLDEN_HEX = (
    "0000009e"  # TOTALSIZE 158
    "daa320a7"  # MAGICCODE
    "11267e8a"  # BODYCRC
    "00000003"  # QUEUEID
    "00000007"  # FLAG
    "000000000000002a"  # QUEUEOFFSET 42
    "0000000000001000"  # PHYSICALOFFSET 4096
    "00000000"  # SYSFLAG
    "0000000000000457"  # BORNTIMESTAMP 1111
    "0a000001000015b3"  # BORNHOST 10.0.0.1:5555
    "00000000000008ae"  # STORETIMESTAMP 2222
    "c0a8010200002a9f"  # STOREHOST 192.168.1.2:10911
    "00000002"  # RECONSUMETIMES
    "0000000000000000"  # PREPARED TRANSACTION OFFSET
    "00000020"
    + BODY.hex()  # BODY LENGTH + BODY
    + "06"
    + b"FooBar".hex()  # TOPIC LENGTH + TOPIC
    + "001d"
    + PROPERTIES_BYTES.hex()  # PROPERTIES LENGTH + PROPERTIES
)


V6_BORN = ("::1", 5555)
V6_STORE = ("fe80::1", 10911)


# The golden record in format v2, written out by hand from reference §2.1-2.2: magic
# 0xDAA320AB and a two-byte topic length, everything else as in v1 (one byte longer).
GOLDEN_V2_HEX = (
    "0000009f"  # TOTALSIZE 159
    "daa320ab"  # MAGICCODE v2
    "11267e8a"  # BODYCRC
    "00000003"  # QUEUEID
    "00000007"  # FLAG
    "000000000000002a"  # QUEUEOFFSET 42
    "0000000000001000"  # PHYSICALOFFSET 4096
    "00000000"  # SYSFLAG
    "0000000000000457"  # BORNTIMESTAMP 1111
    "0a000001000015b3"  # BORNHOST 10.0.0.1:5555
    "00000000000008ae"  # STORETIMESTAMP 2222
    "c0a8010200002a9f"  # STOREHOST 192.168.1.2:10911
    "00000002"  # RECONSUMETIMES
    "0000000000000000"  # PREPARED TRANSACTION OFFSET
    "00000020"
    + BODY.hex()  # BODY LENGTH + BODY
    + "0006"
    + b"FooBar".hex()  # TOPIC LENGTH (short) + TOPIC
    + "001d"
    + PROPERTIES_BYTES.hex()  # PROPERTIES LENGTH + PROPERTIES
)
GOLDEN_V2 = bytes.fromhex(GOLDEN_V2_HEX)


def in_buffer(record: bytes, position: int = 100, tail: int = 300) -> bytearray:
    """``record`` at ``position`` of a zeroed buffer with ``tail`` zero bytes after it."""
    buffer = bytearray(position + len(record) + tail)
    buffer[position : position + len(record)] = record
    return buffer


def packed(host: str) -> bytes:
    return ipaddress.ip_address(host).packed


def to_v2(record: bytes, topic: str | None = None) -> bytes:
    """The v2 form of a v1 record with any host widths: magic, a two-byte topic length,
    TOTALSIZE; ``topic`` replaces the topic when given (v2 may hold one over 127 bytes)."""
    sys_flag: int = struct.unpack_from(">i", record, 36)[0]
    header = 88 + 12 * ((sys_flag & 0x10) // 0x10 + (sys_flag & 0x20) // 0x20)
    at = header + struct.unpack_from(">i", record, header - 4)[0]
    old_topic = record[at + 1 : at + 1 + record[at]]
    new_topic = old_topic if topic is None else topic.encode()
    rebuilt = bytearray(
        record[:at]
        + struct.pack(">h", len(new_topic))
        + new_topic
        + record[at + 1 + len(old_topic) :]
    )
    struct.pack_into(">ii", rebuilt, 0, len(rebuilt), MESSAGE_MAGIC_CODE_V2)
    return bytes(rebuilt)


KEYED_PROPERTIES = {
    "IDEMPOTENCY_KEY": "order-17",
    "IDEMPOTENCY_FP": "9f86d081884c7d65",
    "IDEMPOTENCY_BATCH": "3",
    "KEYS": "a b",
    "UNIQ_KEY": "7F0000010001ABCD",
}


def every_kind_of_message_record() -> list[Any]:
    """One record of every kind a CommitLog can hold, as ``pytest.param(bytes, id=...)``:
    v1 and v2, every host width, a batch member, keyed (idempotency) properties,
    transaction halves, an empty body, non-UTF-8 body bytes."""
    v6_both = golden_record(born_host=V6_BORN, store_host=V6_STORE)
    batch = EncodedBatch(
        [golden_message(), golden_message(properties=KEYED_PROPERTIES)], False, 4096
    )
    batch_data, _units, batch_offsets = batch.pack(4096, 42, 2222, bytes([192, 168, 1, 2]), 10911)
    second_at = batch_offsets[1] - 4096
    cases = {
        "v1": golden_record(),
        "v1-born-v6": golden_record(born_host=V6_BORN),
        "v1-store-v6": golden_record(store_host=V6_STORE),
        "v1-both-v6": v6_both,
        "v2": to_v2(golden_record()),
        "v2-both-v6-long-topic": to_v2(v6_both, "T" * 200),
        "batch-member": batch_data[second_at:],
        "keyed": _record(golden_message(properties=KEYED_PROPERTIES)),
        "prepared": _record(golden_message(sys_flag=0x4)),
        "committed": _record(golden_message(sys_flag=0x8)),
        "rolled-back": _record(golden_message(sys_flag=0xC)),
        "empty": _record(golden_message(body=b"", properties={})),
        "binary-body": _record(golden_message(body=bytes(range(256)))),
    }
    return [pytest.param(record, id=name) for name, record in cases.items()]


def _record(message: Message) -> bytes:
    return encode_message(message, 42, 4096, 2222, ("192.168.1.2", 10911))


def expected_view(message: StoredMessage) -> NamedView:
    """What :func:`~storage.record.fields.message_view` shows of a record, from the record
    decoded: every property but TAGS, KEYS and the broker's bookkeeping."""
    shown = shown_properties(message.properties)
    properties = {k: v for k, v in shown.items() if k not in ("TAGS", "KEYS")}
    return NamedView(
        message.msg_id,
        message.topic,
        message.queue_id,
        message.queue_offset,
        message.physical_offset,
        message.size,
        message.body,
        message.tags,
        message.keys,
        properties,
        message.born_timestamp,
        message.store_timestamp,
        message.reconsume_times,
    )


UNIQ_KEY = "7F00000177E79C05D4128A6C4062529A"  # what a send sets: 32 hex digits


def with_properties(properties: dict[str, str], **overrides: Any) -> bytes:
    message = golden_message(properties=properties, **overrides)
    return encode_message(message, 42, 4096, 2222, ("192.168.1.2", 10911))


def uniq_key_records() -> list[Any]:
    """Records whose PROPERTIES hold a UNIQ_KEY alone (the common case, read without decoding
    them) and records that only look like one (read by decoding)."""
    cases = {
        "uniq-key-only": with_properties({"UNIQ_KEY": UNIQ_KEY}),
        "uniq-key-only-binary-body": with_properties(
            {"UNIQ_KEY": UNIQ_KEY}, body=bytes(range(200, 256))
        ),
        "uniq-key-lowercase": with_properties({"UNIQ_KEY": UNIQ_KEY.lower()}),
        "uniq-key-v2": to_v2(with_properties({"UNIQ_KEY": UNIQ_KEY})),
        "uniq-key-not-hex": with_properties({"UNIQ_KEY": UNIQ_KEY[:-1] + "-"}),
        "uniq-key-separator-inside": with_properties({"UNIQ_KEY": UNIQ_KEY[:-1] + "\x01"}),
        "uniq-key-not-ascii": with_properties({"UNIQ_KEY": "\u00e9" * 16}),
        "uniq-key-short": with_properties({"UNIQ_KEY": UNIQ_KEY[:31]}),
        "uniq-key-long": with_properties({"UNIQ_KEY": UNIQ_KEY + "0"}),
        "uniq-key-and-tags": with_properties({"UNIQ_KEY": UNIQ_KEY, "TAGS": "A"}),
        "tags-then-uniq-key": with_properties({"TAGS": "A", "UNIQ_KEY": UNIQ_KEY}),
        "other-32-char-property": with_properties({"UNIQ_KEX": UNIQ_KEY}),
        "uniq-key-empty-body": with_properties({"UNIQ_KEY": UNIQ_KEY}, body=b""),
    }
    return [pytest.param(record, id=name) for name, record in cases.items()]

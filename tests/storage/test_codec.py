"""codec: the CommitLog record byte for byte, hashes, properties, msgId, record checks, CQ unit."""

from __future__ import annotations

import ipaddress
import mmap
import struct
import zlib
from typing import Any

import pytest

from storage.codec import (
    BLANK_MAGIC_CODE,
    CQ_UNIT_SIZE,
    CQ_UNIT_STRUCT,
    FIXED_OVERHEAD_V4_V2,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    EncodedBatch,
    EncodedMessage,
    Message,
    MessageId,
    RecordCheck,
    RecordKind,
    blank_record,
    body_crc,
    check_batch,
    check_record,
    decode_msg_id,
    decode_properties,
    decode_record,
    encode_message,
    encode_msg_id,
    encode_properties,
    java_string_hash,
    msg_id_prefix,
    read_store_timestamp,
    tags_code,
    to_int32,
    validate_topic,
)
from storage.errors import (
    InvalidTopicError,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)

BODY = bytes(range(32))


def _in_mmap(data: bytes) -> mmap.mmap:
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


# ---------------------------------------------------------------- the golden record


def test_golden_record_is_158_bytes_exactly_as_written_by_hand() -> None:
    record = golden_record()
    assert len(record) == 158 == 91 + 32 + 6 + 29
    assert record.hex() == GOLDEN_HEX


GOLDEN_FIELDS = [
    pytest.param(0, ">i", 158, id="TOTALSIZE@0"),
    pytest.param(4, ">I", 0xDAA320A7, id="MAGIC@4"),
    pytest.param(8, ">i", zlib.crc32(BODY) & 0x7FFFFFFF, id="BODYCRC@8"),
    pytest.param(12, ">i", 3, id="QUEUEID@12"),
    pytest.param(16, ">i", 7, id="FLAG@16"),
    pytest.param(20, ">q", 42, id="QUEUEOFFSET@20"),
    pytest.param(28, ">q", 4096, id="PHYSICALOFFSET@28"),
    pytest.param(36, ">i", 0, id="SYSFLAG@36"),
    pytest.param(40, ">q", 1111, id="BORNTIMESTAMP@40"),
    pytest.param(48, ">4si", (bytes([10, 0, 0, 1]), 5555), id="BORNHOST@48"),
    pytest.param(56, ">q", 2222, id="STORETIMESTAMP@56"),
    pytest.param(64, ">4si", (bytes([192, 168, 1, 2]), 10911), id="STOREHOST@64"),
    pytest.param(72, ">i", 2, id="RECONSUMETIMES@72"),
    pytest.param(76, ">q", 0, id="PREPARED@76"),
    pytest.param(84, ">i", 32, id="BODYLEN@84"),
    pytest.param(88, ">32s", BODY, id="BODY@88"),
    pytest.param(120, ">B6s", (6, b"FooBar"), id="TOPIC@120"),
    pytest.param(127, ">h29s", (29, PROPERTIES_BYTES), id="PROPERTIES@127"),
]


@pytest.mark.parametrize(("offset", "fmt", "expected"), GOLDEN_FIELDS)
def test_golden_record_field_at_reference_offset(offset: int, fmt: str, expected: Any) -> None:
    values = struct.unpack_from(fmt, golden_record(), offset)
    assert (values[0] if len(values) == 1 else values) == expected


def test_golden_record_decodes_back() -> None:
    stored = decode_record(golden_record())
    assert stored.topic == "FooBar"
    assert stored.body == BODY
    assert stored.properties == {"TAGS": "TAG1", "KEYS": KEYS}
    assert stored.tags == "TAG1"
    assert stored.keys == [KEYS]
    assert (stored.queue_id, stored.queue_offset, stored.physical_offset) == (3, 42, 4096)
    assert (stored.flag, stored.sys_flag, stored.reconsume_times) == (7, 0, 2)
    assert stored.born_host == ("10.0.0.1", 5555)
    assert stored.store_host == ("192.168.1.2", 10911)
    assert (stored.born_timestamp, stored.store_timestamp) == (1111, 2222)
    assert stored.size == 158
    assert stored.body_crc == zlib.crc32(BODY) & 0x7FFFFFFF


def test_body_crc_is_masked_to_31_bits() -> None:
    # zlib.crc32(b"a") = 0xE8B7BE43 has the top bit set; the mask clears it.
    assert zlib.crc32(b"a") == 0xE8B7BE43
    assert body_crc(b"a") == 0x68B7BE43
    assert body_crc(b"") == 0
    record = encode_message(golden_message(body=b"a"))
    assert struct.unpack_from(">i", record, 8)[0] == 0x68B7BE43


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(bytes, id="bytes"),
        pytest.param(bytearray, id="bytearray"),
        pytest.param(memoryview, id="memoryview"),
        pytest.param(_in_mmap, id="mmap"),
    ],
)
def test_decode_record_from_any_buffer_at_a_position(wrap: Any) -> None:
    data = bytes(77) + golden_record(born_host=V6_BORN) + bytes(5)
    stored = decode_record(wrap(data), 77)
    assert (stored.topic, stored.body, stored.size) == ("FooBar", BODY, 170)
    assert type(stored.body) is bytes
    assert stored.properties == {"TAGS": "TAG1", "KEYS": KEYS}
    assert stored.born_host == V6_BORN


# ---------------------------------------------------------------- IPv6 hosts

V6_BORN = ("::1", 5555)
V6_STORE = ("fe80::1", 10911)

IPV6_CASES = [
    # born v6, store v6, sys flag, store-timestamp position, store-host position, body position
    pytest.param(V6_BORN, ("192.168.1.2", 10911), 0x10, 68, 76, 100, id="born-v6"),
    pytest.param(("10.0.0.1", 5555), V6_STORE, 0x20, 56, 64, 100, id="store-v6"),
    pytest.param(V6_BORN, V6_STORE, 0x30, 68, 76, 112, id="both-v6"),
]


@pytest.mark.parametrize(
    ("born", "store", "sys_flag", "store_ts_at", "store_host_at", "body_at"), IPV6_CASES
)
def test_ipv6_hosts_widen_fields_and_set_sys_flag(
    born: tuple[str, int],
    store: tuple[str, int],
    sys_flag: int,
    store_ts_at: int,
    store_host_at: int,
    body_at: int,
) -> None:
    record = golden_record(born_host=born, store_host=store)
    shift = body_at - 88
    assert len(record) == 158 + shift
    assert struct.unpack_from(">i", record, 0)[0] == len(record)
    assert struct.unpack_from(">i", record, 36)[0] == sys_flag
    born_len = 16 if sys_flag & 0x10 else 4
    store_len = 16 if sys_flag & 0x20 else 4
    born_address, born_port = struct.unpack_from(f">{born_len}si", record, 48)
    assert (born_address, born_port) == (_packed(born[0]), born[1])
    assert struct.unpack_from(">q", record, store_ts_at)[0] == 2222
    store_address, store_port = struct.unpack_from(f">{store_len}si", record, store_host_at)
    assert (store_address, store_port) == (_packed(store[0]), store[1])
    assert struct.unpack_from(">i", record, body_at - 4)[0] == 32
    assert record[body_at : body_at + 32] == BODY
    assert record[body_at + 32] == 6
    assert read_store_timestamp(record) == 2222
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.MESSAGE
    stored = decode_record(record)
    assert (stored.born_host, stored.store_host) == (born, store)
    assert stored.sys_flag == sys_flag
    assert stored.body == BODY


def _packed(host: str) -> bytes:
    return ipaddress.ip_address(host).packed


def test_v6_flags_from_the_caller_are_replaced_by_the_real_host_widths() -> None:
    # A caller-supplied sysFlag claiming IPv6 hosts must not corrupt an IPv4 record.
    record = encode_message(golden_message(sys_flag=0x30 | 0x2))
    assert struct.unpack_from(">i", record, 36)[0] == 0x2
    assert len(record) == 158


# ---------------------------------------------------------------- Java hash, tags code

JAVA_HASHES = [
    pytest.param("TAG1", 2567159, id="TAG1"),
    pytest.param("TagA", 2598919, id="TagA"),
    pytest.param("", 0, id="empty"),
    pytest.param("hello", 99162322, id="hello"),
    pytest.param("Hello World", -862545276, id="negative"),
    pytest.param("polygenelubricants", -(2**31), id="int32-min-wrap"),
    pytest.param("é", 0xE9, id="latin1"),
    pytest.param("日本", 0x65E5 * 31 + 0x672C, id="cjk"),
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16.
    pytest.param("\U0001f600", 0xD83D * 31 + 0xDE00, id="astral-surrogates"),
]


@pytest.mark.parametrize(("text", "expected"), JAVA_HASHES)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def _reference_java_hash(text: str) -> int:
    """The textbook loop over UTF-16 code units, wrapped to a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("key-0000012345", id="index-key"),
        pytest.param("a" * 1024, id="1024-ascii"),
        pytest.param("a" * 1025, id="1025-ascii"),
        pytest.param("é" * 1500, id="long-latin1"),
        pytest.param("x\U0001f600" * 700, id="long-astral"),
        pytest.param("Zz9" * 3000, id="9000-chars"),
    ],
)
def test_java_string_hash_of_long_and_mixed_strings(text: str) -> None:
    assert java_string_hash(text) == _reference_java_hash(text)


def test_tags_code_is_zero_without_a_tag_and_the_java_hash_otherwise() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("Hello World") == -862545276  # negative: sign-extended in the CQ unit


def test_to_int32_keeps_the_low_32_bits_signed() -> None:
    assert to_int32(-862545276) == -862545276
    assert to_int32(0xFFFFFFFF) == -1
    assert to_int32(2**32 + 5) == 5


def test_encoded_message_carries_tags_code_and_keys() -> None:
    encoded = EncodedMessage(golden_message(), store_v6=False, max_body_size=1024)
    assert encoded.tags_code == 2567159
    assert encoded.keys == KEYS
    assert encoded.size == 158


# ---------------------------------------------------------------- properties


def test_encode_properties_uses_separators_with_trailing_separator() -> None:
    assert encode_properties({"TAGS": "TAG1", "KEYS": KEYS}) == PROPERTIES_BYTES
    assert encode_properties({}) == b""
    assert encode_properties({"K": "värde"}) == "K\x01värde\x02".encode()


PROPERTY_PARSES = [
    pytest.param(b"A\x011\x02B\x012\x02", {"A": "1", "B": "2"}, id="trailing-separator"),
    pytest.param(b"A\x011\x02B\x012", {"A": "1", "B": "2"}, id="no-trailing-separator"),
    pytest.param(b"\x01v\x02A\x011", {"A": "1"}, id="empty-name-dropped"),
    pytest.param(b"A\x01\x02B\x012", {"B": "2"}, id="empty-value-dropped"),
    pytest.param(b"junk\x02A\x011", {"A": "1"}, id="segment-without-separator-dropped"),
    pytest.param(b"A\x011\x02A\x012", {"A": "2"}, id="later-duplicate-wins"),
    pytest.param(b"", {}, id="empty"),
    pytest.param("K\x01värde", {"K": "värde"}, id="str-input"),
]


@pytest.mark.parametrize(("raw", "expected"), PROPERTY_PARSES)
def test_decode_properties(raw: bytes | str, expected: dict[str, str]) -> None:
    assert decode_properties(raw) == expected


def test_record_without_trailing_property_separator_decodes() -> None:
    # RocketMQ 4.9.1 .. 5.1.x writes no trailing \x02: patch one in by hand.
    record = bytearray(golden_record())
    props_at = 127
    struct.pack_into(">h", record, props_at, 28)
    record = record[:-1]
    struct.pack_into(">i", record, 0, len(record))
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.MESSAGE
    assert decode_record(record).properties == {"TAGS": "TAG1", "KEYS": KEYS}


# ---------------------------------------------------------------- msgId


def test_msg_id_ipv4_is_32_uppercase_hex_chars() -> None:
    msg_id = encode_msg_id("127.0.0.1", 10911, 0)
    assert msg_id == "7F00000100002A9F0000000000000000"
    big = encode_msg_id("192.168.1.2", 10911, 0x1234_5678_9ABC)
    assert len(big) == 32
    assert big == big.upper()
    assert big.endswith("0000123456789ABC")


def test_msg_id_ipv6_is_56_chars() -> None:
    msg_id = encode_msg_id("fe80::1", 10911, 4096)
    assert len(msg_id) == 56
    assert msg_id == msg_id.upper()
    assert msg_id.startswith("FE80" + "0" * 24 + "0001")


@pytest.mark.parametrize(
    "host",
    [pytest.param("10.1.2.3", id="ipv4"), pytest.param("2001:db8::7", id="ipv6")],
)
def test_msg_id_round_trips(host: str) -> None:
    msg_id = encode_msg_id(host, 10911, 123_456_789_012)
    assert decode_msg_id(msg_id) == MessageId(host, 10911, 123_456_789_012)
    assert decode_msg_id(msg_id.lower()) == MessageId(host, 10911, 123_456_789_012)


def test_stored_message_msg_id_uses_store_host_and_physical_offset() -> None:
    stored = decode_record(golden_record())
    assert stored.msg_id == encode_msg_id("192.168.1.2", 10911, 4096)


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param("", id="empty"),
        pytest.param("7F000001", id="too-short"),
        pytest.param("Z" * 32, id="not-hex"),
        pytest.param("7F00000100002A9F000000000000000", id="31-chars"),
        pytest.param("0" * 40, id="40-chars"),
        # bytes.fromhex skips whitespace: 32 characters, but only 14 bytes.
        pytest.param("7F000001 00002A9F 000000000000  ", id="32-chars-with-spaces"),
        pytest.param(" " * 56, id="56-spaces"),
    ],
)
def test_decode_msg_id_rejects_malformed_ids(bad: str) -> None:
    with pytest.raises(ValueError):
        decode_msg_id(bad)


# ---------------------------------------------------------------- validation on encode


@pytest.mark.parametrize(
    "topic",
    [
        pytest.param("", id="empty"),
        pytest.param("a" * 128, id="128-chars"),
        pytest.param("a/b", id="slash"),
        pytest.param("../x", id="dot-dot"),
        pytest.param("a b", id="space"),
        pytest.param("tøpic", id="unicode"),
        pytest.param("abc\n", id="trailing-newline"),
        pytest.param("a.b", id="dot"),
    ],
)
def test_validate_topic_rejects(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_topic(topic)


@pytest.mark.parametrize(
    "topic",
    [
        pytest.param("a" * 127, id="127-chars"),
        pytest.param("%RETRY%group_1", id="retry"),
        pytest.param("A|b-C_9", id="pipe-dash-underscore"),
    ],
)
def test_validate_topic_accepts(topic: str) -> None:
    assert validate_topic(topic) == topic.encode()


def test_body_over_the_limit_is_rejected() -> None:
    EncodedMessage(golden_message(body=b"x" * 100), store_v6=False, max_body_size=100)
    with pytest.raises(MessageTooLargeError):
        EncodedMessage(golden_message(body=b"x" * 101), store_v6=False, max_body_size=100)


@pytest.mark.parametrize(
    "properties",
    [
        pytest.param({"TAGS": "\ud800"}, id="lone-surrogate-value"),
        pytest.param({"\udfff": "v"}, id="lone-surrogate-name"),
    ],
)
def test_properties_that_are_not_unicode_are_rejected(properties: dict[str, str]) -> None:
    # JSON can carry "\ud800"; it has no UTF-8 encoding, so it cannot be stored.
    with pytest.raises(MessageRejectedError):
        EncodedMessage(golden_message(properties=properties), store_v6=False, max_body_size=64)


def test_properties_limit_is_32767_encoded_bytes() -> None:
    # "K\x01" + value + "\x02" = len(value) + 3 bytes.
    fits = golden_message(properties={"K": "v" * (32767 - 3)})
    assert len(encode_message(fits)) == 91 + 32 + 6 + 32767
    with pytest.raises(PropertiesTooLargeError):
        EncodedMessage(
            golden_message(properties={"K": "v" * (32768 - 3)}), store_v6=False, max_body_size=64
        )
    # The limit counts UTF-8 bytes, not characters: 2-byte "é" x 16383 + 3 = 32769 bytes.
    with pytest.raises(PropertiesTooLargeError):
        EncodedMessage(
            golden_message(properties={"K": "é" * 16383}), store_v6=False, max_body_size=64
        )


# ---------------------------------------------------------------- check_record


def _in_buffer(record: bytes, position: int = 100, tail: int = 300) -> bytearray:
    """``record`` at ``position`` of a zeroed buffer with ``tail`` zero bytes after it."""
    buffer = bytearray(position + len(record) + tail)
    buffer[position : position + len(record)] = record
    return buffer


def test_check_valid_record() -> None:
    buffer = _in_buffer(golden_record())
    check = check_record(buffer, 100, len(buffer), check_crc=True)
    assert (check.kind, check.size) == (RecordKind.MESSAGE, 158)


def test_check_blank() -> None:
    buffer = _in_buffer(blank_record(3996))
    assert blank_record(3996) == struct.pack(">ii", 3996, BLANK_MAGIC_CODE)
    assert check_record(buffer, 100, len(buffer), check_crc=True).kind is RecordKind.BLANK


@pytest.mark.parametrize(
    "limit_after",
    [
        pytest.param(157, id="last-byte-missing"),
        pytest.param(50, id="half-record"),
        pytest.param(7, id="shorter-than-header"),
        pytest.param(0, id="nothing"),
    ],
)
def test_check_torn_tail_is_end(limit_after: int) -> None:
    buffer = _in_buffer(golden_record())
    check = check_record(buffer, 100, 100 + limit_after, check_crc=True)
    assert check.kind is RecordKind.END


def test_check_zero_area_is_end() -> None:
    buffer = bytearray(4096)
    assert check_record(buffer, 0, len(buffer), check_crc=True).kind is RecordKind.END
    assert check_record(buffer, 1000, len(buffer), check_crc=True).kind is RecordKind.END


def test_check_garbage_magic_is_corrupt() -> None:
    record = bytearray(golden_record())
    struct.pack_into(">I", record, 4, 0x12345678)
    buffer = _in_buffer(bytes(record))
    assert check_record(buffer, 100, len(buffer), check_crc=False).kind is RecordKind.CORRUPT


@pytest.mark.parametrize(
    "total_size",
    [
        pytest.param(157, id="one-short"),
        pytest.param(159, id="one-long"),
        pytest.param(300, id="much-longer"),
        pytest.param(20, id="below-fixed-overhead"),
        pytest.param(-5, id="negative"),
    ],
)
def test_check_wrong_total_size_is_corrupt(total_size: int) -> None:
    record = bytearray(golden_record())
    struct.pack_into(">i", record, 0, total_size)
    buffer = _in_buffer(bytes(record))
    check = check_record(buffer, 100, len(buffer), check_crc=False)
    assert check.kind is RecordKind.CORRUPT


def test_check_flipped_body_byte_is_corrupt_only_with_crc_check() -> None:
    record = bytearray(golden_record())
    record[88 + 5] ^= 0xFF
    buffer = _in_buffer(bytes(record))
    assert check_record(buffer, 100, len(buffer), check_crc=False).kind is RecordKind.MESSAGE
    assert check_record(buffer, 100, len(buffer), check_crc=True).kind is RecordKind.CORRUPT


def test_check_ipv6_record_with_flipped_body_byte() -> None:
    record = bytearray(golden_record(born_host=V6_BORN, store_host=V6_STORE))
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.MESSAGE
    record[112] ^= 0x01
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.CORRUPT


def test_magic_codes() -> None:
    assert MESSAGE_MAGIC_CODE & 0xFFFFFFFF == 0xDAA320A7
    assert BLANK_MAGIC_CODE & 0xFFFFFFFF == 0xCBD43194


# ---------------------------------------------------------------- ConsumeQueue unit


def test_cq_unit_is_20_bytes_big_endian_with_sign_extended_tags_code() -> None:
    assert CQ_UNIT_SIZE == 20
    unit = CQ_UNIT_STRUCT.pack(4096, 158, java_string_hash("Hello World"))
    assert len(unit) == 20
    assert unit[:8] == (4096).to_bytes(8, "big")
    assert unit[8:12] == (158).to_bytes(4, "big")
    assert unit[12:] == (-862545276).to_bytes(8, "big", signed=True)
    assert unit[12:16] == b"\xff\xff\xff\xff"  # sign extension into the high word
    assert CQ_UNIT_STRUCT.unpack(unit) == (4096, 158, -862545276)


# ---------------------------------------------------------------- format v2 (RocketMQ 5.x)

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


def to_v2(record: bytes) -> bytes:
    """A v1 record (IPv4 hosts) rewritten as v2: new magic, two-byte topic length."""
    body_end = 88 + struct.unpack_from(">i", record, 84)[0]
    head = struct.pack(">ii", len(record) + 1, MESSAGE_MAGIC_CODE_V2) + record[8:body_end]
    return head + struct.pack(">h", record[body_end]) + record[body_end + 1 :]


def test_golden_v2_record_is_the_v1_layout_with_a_short_topic_length() -> None:
    assert len(GOLDEN_V2) == 159 == FIXED_OVERHEAD_V4_V2 + 32 + 6 + 29
    assert to_v2(golden_record()) == GOLDEN_V2


@pytest.mark.parametrize(
    ("offset", "fmt", "expected"),
    [
        pytest.param(0, ">i", 159, id="TOTALSIZE@0"),
        pytest.param(4, ">I", 0xDAA320AB, id="MAGIC@4"),
        pytest.param(120, ">h6s", (6, b"FooBar"), id="TOPIC@120"),
        pytest.param(128, ">h29s", (29, PROPERTIES_BYTES), id="PROPERTIES@128"),
    ],
)
def test_golden_v2_field_at_reference_offset(offset: int, fmt: str, expected: Any) -> None:
    values = struct.unpack_from(fmt, GOLDEN_V2, offset)
    assert (values[0] if len(values) == 1 else values) == expected


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, _in_mmap])
def test_golden_v2_record_decodes_field_by_field(wrap: Any) -> None:
    stored = decode_record(wrap(b"\x00" * 5 + GOLDEN_V2), 5)
    assert stored.topic == "FooBar"
    assert stored.body == BODY and type(stored.body) is bytes
    assert stored.properties == {"TAGS": "TAG1", "KEYS": KEYS}
    assert (stored.queue_id, stored.queue_offset, stored.physical_offset) == (3, 42, 4096)
    assert (stored.flag, stored.sys_flag, stored.reconsume_times) == (7, 0, 2)
    assert stored.prepared_transaction_offset == 0
    assert stored.born_host == ("10.0.0.1", 5555)
    assert stored.store_host == ("192.168.1.2", 10911)
    assert (stored.born_timestamp, stored.store_timestamp) == (1111, 2222)
    assert stored.size == 159
    assert stored.body_crc == zlib.crc32(BODY) & 0x7FFFFFFF
    assert stored.msg_id == "C0A8010200002A9F0000000000001000"
    assert read_store_timestamp(GOLDEN_V2) == 2222


def test_v2_record_with_ipv6_hosts_and_a_topic_over_127_characters() -> None:
    topic = "T" * 200  # why RocketMQ 5 writes v2 at all
    v1 = bytearray(golden_record(born_host=("::1", 1), store_host=("fe80::2", 2)))
    body_end = 112 + 32  # two IPv6 hosts: the header is 112 bytes
    assert struct.unpack_from(">i", v1, 108)[0] == 32
    tail = v1[body_end + 1 + 6 :]
    record = (
        struct.pack(">ii", 0, MESSAGE_MAGIC_CODE_V2)
        + bytes(v1[8:body_end])
        + struct.pack(">h", 200)
        + topic.encode()
        + bytes(tail)
    )
    record = struct.pack(">i", len(record)) + record[4:]
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.MESSAGE
    stored = decode_record(record)
    assert stored.topic == topic
    assert stored.born_host == ("::1", 1) and stored.store_host == ("fe80::2", 2)
    assert stored.properties == {"TAGS": "TAG1", "KEYS": KEYS}
    assert stored.size == len(record) == 116 + 32 + 200 + 29


def test_check_v2_record() -> None:
    check = check_record(GOLDEN_V2, 0, len(GOLDEN_V2), check_crc=True)
    assert check == RecordCheck(RecordKind.MESSAGE, 159)
    cut = check_record(GOLDEN_V2, 0, 158, check_crc=False)
    assert cut.kind is RecordKind.END, "a v2 record cut short is a torn tail"
    as_v1_size = bytearray(GOLDEN_V2)
    struct.pack_into(">i", as_v1_size, 0, 158)  # a v1 length does not match v2 fields
    assert check_record(as_v1_size, 0, 159, check_crc=False).kind is RecordKind.CORRUPT
    flipped = bytearray(GOLDEN_V2)
    flipped[100] ^= 0xFF  # in the body
    assert check_record(flipped, 0, 159, check_crc=False).kind is RecordKind.MESSAGE
    assert check_record(flipped, 0, 159, check_crc=True).kind is RecordKind.CORRUPT
    too_small = struct.pack(">ii", 91, MESSAGE_MAGIC_CODE_V2) + bytes(83)
    assert check_record(too_small, 0, 91, check_crc=False).kind is RecordKind.CORRUPT


# ---------------------------------------------------------------- msgId prefix


def test_msg_id_prefix_is_the_id_before_its_16_offset_digits() -> None:
    assert msg_id_prefix("127.0.0.1", 10911) == "7F00000100002A9F"
    assert msg_id_prefix("::1", 10911) == "0" * 30 + "01" + "00002A9F"
    for offset in (0, 4096, 2**40 + 5, 2**63 - 1):
        msg_id = encode_msg_id("10.1.2.3", 8080, offset)
        assert msg_id == msg_id_prefix("10.1.2.3", 8080) + f"{offset:016X}"
        assert decode_msg_id(msg_id) == MessageId("10.1.2.3", 8080, offset)


def test_a_negative_offset_is_written_as_its_twos_complement() -> None:
    msg_id = encode_msg_id("127.0.0.1", 1, -8)
    assert msg_id.endswith("FFFFFFFFFFFFFFF8")
    assert decode_msg_id(msg_id).physical_offset == -8


@pytest.mark.parametrize("offset", [-(2**63) - 1, 2**63])
def test_encode_msg_id_refuses_an_offset_that_is_not_a_long(offset: int) -> None:
    with pytest.raises(ValueError, match="physical offset"):
        encode_msg_id("127.0.0.1", 1, offset)


# ---------------------------------------------------------------- whole-batch encoder


def batch_messages() -> list[Message]:
    return [
        golden_message(),
        golden_message(body=b"", properties={}),
        golden_message(body=bytes(range(256)) * 3, properties={"TAGS": "Étiquette", "k": "日本"}),
        golden_message(born_host=("::1", 7), flag=-1, reconsume_times=9, born_timestamp=-5),
        golden_message(properties={"UNIQ_KEY": "7F000001ABCD", "KEYS": "a b"}),
    ]


@pytest.mark.parametrize("store_host", [("192.168.1.2", 10911), ("fe80::2", 10911)])
def test_encoded_batch_packs_what_the_record_encoder_packs(store_host: tuple[str, int]) -> None:
    messages = batch_messages()
    store_address = ipaddress.ip_address(store_host[0]).packed
    batch = EncodedBatch(messages, len(store_address) == 16, 4096)
    data, units, offsets = batch.pack(5000, 40, 123456, store_address, store_host[1])
    expected = []
    offset = 5000
    for queue_offset, message in enumerate(messages, 40):
        record = encode_message(message, queue_offset, offset, 123456, store_host, 4096)
        expected.append(record)
        offset += len(record)
    assert data == b"".join(expected)
    assert batch.size == len(data) and batch.count == len(messages)
    assert batch.sizes == [len(r) for r in expected]
    assert offsets == [5000 + sum(batch.sizes[:i]) for i in range(len(messages))]
    assert list(CQ_UNIT_STRUCT.iter_unpack(units)) == [
        (o, size, tags_code(m.properties.get("TAGS")))
        for o, size, m in zip(offsets, batch.sizes, messages, strict=True)
    ]
    assert batch.keys == [m.properties.get("KEYS") for m in messages]
    assert batch.uniq_keys == [m.properties.get("UNIQ_KEY") for m in messages]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (golden_message(body=b"x" * 4097), MessageTooLargeError),
        (golden_message(properties={"p": "x" * 40000}), PropertiesTooLargeError),
        (golden_message(properties={"p": "\ud800"}), MessageRejectedError),
    ],
)
def test_encoded_batch_refuses_what_the_record_encoder_refuses(
    bad: Message, error: type[Exception]
) -> None:
    with pytest.raises(error):
        EncodedMessage(bad, store_v6=False, max_body_size=4096)
    with pytest.raises(error):
        EncodedBatch([golden_message(), bad], store_v6=False, max_body_size=4096)


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (golden_message(properties={"DELAY": "2"}), "cannot be delayed"),
        (golden_message(properties={"DELAY": "x"}), "DELAY must be"),
        (golden_message(sys_flag=0x4), "transactional"),
        (golden_message(queue_id=4), "same topic and queue"),
        (golden_message(topic="Other"), "same topic and queue"),
        (golden_message(flag=2**31), "out of range"),
    ],
)
def test_check_batch_refuses_a_batch_that_cannot_be_written_whole(
    bad: Message, reason: str
) -> None:
    check_batch([golden_message(), golden_message(properties={"DELAY": "0"})])
    with pytest.raises(MessageRejectedError, match=reason):
        check_batch([golden_message(), bad])

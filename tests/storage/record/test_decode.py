"""decode: framing (MESSAGE, BLANK, END, CORRUPT) and decoding, v1 and v2, from any buffer."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest

from storage.record.decode import (
    RecordCheck,
    RecordKind,
    check_record,
    check_v4_record,
    classify_start,
    decode_record,
    read_store_timestamp,
    stored_properties,
)
from storage.record.encode import blank_record
from storage.record.layout import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from tests.storage.record.golden import (
    BODY,
    GOLDEN_V2,
    KEYS,
    V6_BORN,
    V6_STORE,
    every_kind_of_message_record,
    golden_record,
    in_buffer,
    in_mmap,
)


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


@pytest.mark.parametrize(
    "wrap",
    [
        pytest.param(bytes, id="bytes"),
        pytest.param(bytearray, id="bytearray"),
        pytest.param(memoryview, id="memoryview"),
        pytest.param(in_mmap, id="mmap"),
    ],
)
def test_decode_record_from_any_buffer_at_a_position(wrap: Any) -> None:
    data = bytes(77) + golden_record(born_host=V6_BORN) + bytes(5)
    stored = decode_record(wrap(data), 77)
    assert (stored.topic, stored.body, stored.size) == ("FooBar", BODY, 170)
    assert type(stored.body) is bytes
    assert stored.properties == {"TAGS": "TAG1", "KEYS": KEYS}
    assert stored.born_host == V6_BORN


@pytest.mark.parametrize("record", every_kind_of_message_record())
def test_stored_properties_are_the_decoded_ones(record: bytes) -> None:
    """What a property filter reads: every property, TAGS and KEYS included."""
    buffer = in_buffer(record)
    assert stored_properties(buffer, 100) == decode_record(buffer, 100).properties


def test_record_without_trailing_property_separator_decodes() -> None:
    # RocketMQ 4.9.1 .. 5.1.x writes no trailing \x02: patch one in by hand.
    record = bytearray(golden_record())
    props_at = 127
    struct.pack_into(">h", record, props_at, 28)
    record = record[:-1]
    struct.pack_into(">i", record, 0, len(record))
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.MESSAGE
    assert decode_record(record).properties == {"TAGS": "TAG1", "KEYS": KEYS}


def test_check_valid_record() -> None:
    buffer = in_buffer(golden_record())
    check = check_record(buffer, 100, len(buffer), check_crc=True)
    assert (check.kind, check.size) == (RecordKind.MESSAGE, 158)


def test_check_blank() -> None:
    buffer = in_buffer(blank_record(3996))
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
    buffer = in_buffer(golden_record())
    check = check_record(buffer, 100, 100 + limit_after, check_crc=True)
    assert check.kind is RecordKind.END


def test_check_zero_area_is_end() -> None:
    buffer = bytearray(4096)
    assert check_record(buffer, 0, len(buffer), check_crc=True).kind is RecordKind.END
    assert check_record(buffer, 1000, len(buffer), check_crc=True).kind is RecordKind.END


def test_check_garbage_magic_is_corrupt() -> None:
    record = bytearray(golden_record())
    struct.pack_into(">I", record, 4, 0x12345678)
    buffer = in_buffer(bytes(record))
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
    buffer = in_buffer(bytes(record))
    check = check_record(buffer, 100, len(buffer), check_crc=False)
    assert check.kind is RecordKind.CORRUPT


def test_check_flipped_body_byte_is_corrupt_only_with_crc_check() -> None:
    record = bytearray(golden_record())
    record[88 + 5] ^= 0xFF
    buffer = in_buffer(bytes(record))
    assert check_record(buffer, 100, len(buffer), check_crc=False).kind is RecordKind.MESSAGE
    assert check_record(buffer, 100, len(buffer), check_crc=True).kind is RecordKind.CORRUPT


def test_check_ipv6_record_with_flipped_body_byte() -> None:
    record = bytearray(golden_record(born_host=V6_BORN, store_host=V6_STORE))
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.MESSAGE
    record[112] ^= 0x01
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.CORRUPT


@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview, in_mmap])
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


# ---------------------------------------------------------------- the v4 fast path


def _around(record: bytes) -> bytearray:
    return in_buffer(record, position=100, tail=50)


def _both_checks(buffer: bytearray, limit: int, check_crc: bool) -> tuple[Any, RecordCheck]:
    return check_v4_record(buffer, 100, limit, check_crc), check_record(
        buffer, 100, limit, check_crc
    )


@pytest.mark.parametrize("record", every_kind_of_message_record())
@pytest.mark.parametrize("check_crc", [False, True])
def test_the_v4_fast_path_agrees_with_check_record(record: bytes, check_crc: bool) -> None:
    buffer = _around(record)
    fast, full = _both_checks(buffer, len(buffer), check_crc)
    assert full == RecordCheck(RecordKind.MESSAGE, len(record))
    is_v4 = struct.unpack_from(">ii", record, 4)[0] == MESSAGE_MAGIC_CODE and not (
        struct.unpack_from(">i", record, 36)[0] & 0x30
    )
    if is_v4:
        body_end = 100 + 88 + struct.unpack_from(">i", record, 84)[0]
        assert fast == (len(record), 3, body_end)
    else:
        assert fast is None  # another layout: the caller asks check_record


@pytest.mark.parametrize(
    ("damage", "crc"),
    [
        pytest.param(lambda r: struct.pack_into(">i", r, 100, 157), False, id="one-short"),
        pytest.param(lambda r: struct.pack_into(">i", r, 100, 200), False, id="too-long"),
        pytest.param(lambda r: struct.pack_into(">i", r, 104, 0x1234), False, id="bad-magic"),
        pytest.param(lambda r: struct.pack_into(">i", r, 184, -1), False, id="negative-body"),
        pytest.param(lambda r: struct.pack_into(">h", r, 227, 1), False, id="properties-length"),
        pytest.param(lambda r: r.__setitem__(200, r[200] ^ 1), True, id="body-crc"),
        pytest.param(lambda r: r.__setitem__(slice(100, 258), bytes(158)), False, id="zeros"),
    ],
)
def test_the_v4_fast_path_refuses_what_check_record_does_not_call_a_message(
    damage: Any, crc: bool
) -> None:
    buffer = _around(golden_record())
    damage(buffer)
    fast, full = _both_checks(buffer, len(buffer), crc)
    assert fast is None
    assert full.kind is not RecordKind.MESSAGE


def test_a_record_cut_short_is_the_end_for_both_checks() -> None:
    buffer = _around(golden_record())
    fast, full = _both_checks(buffer, 100 + 157, False)
    assert fast is None
    assert full.kind is RecordKind.END


@pytest.mark.parametrize(
    ("total", "magic", "limit", "expected"),
    [
        pytest.param(158, MESSAGE_MAGIC_CODE, 1000, None, id="message"),
        pytest.param(3996, BLANK_MAGIC_CODE, 1000, RecordKind.BLANK, id="blank"),
        pytest.param(0, 0, 1000, RecordKind.END, id="zeros"),
        pytest.param(158, MESSAGE_MAGIC_CODE, 157, RecordKind.END, id="cut-short"),
        pytest.param(90, MESSAGE_MAGIC_CODE, 1000, RecordKind.CORRUPT, id="v1-too-small"),
        pytest.param(91, MESSAGE_MAGIC_CODE_V2, 1000, RecordKind.CORRUPT, id="v2-too-small"),
        pytest.param(0, 0x1234, 1000, RecordKind.CORRUPT, id="unknown-magic"),
    ],
)
def test_the_first_eight_bytes_classify_a_position(
    total: int, magic: int, limit: int, expected: RecordKind | None
) -> None:
    verdict = classify_start(0, limit, total, magic)
    assert (verdict.kind if verdict else None) is expected

"""layout: every field of the record at its reference offset, v1 and v2; the CQ unit."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.record.encode import encode_message
from storage.record.java_hash import java_string_hash
from storage.record.layout import (
    BLANK_MAGIC_CODE,
    BLANK_STRUCT,
    BODY_CRC_POSITION,
    BODY_LENGTH_POSITION_V4,
    BORN_HOST_POSITION,
    BORNHOST_V6_FLAG,
    CQ_UNIT_SIZE,
    CQ_UNIT_STRUCT,
    END_FILE_MIN_BLANK_LENGTH,
    FIXED_FIELDS_V4,
    FIXED_OVERHEAD_V4,
    FIXED_OVERHEAD_V4_V2,
    HEAD_TO_SYSFLAG,
    HOST_V6_BITS,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    MIN_RECORD_SIZE,
    PHYSICAL_OFFSET_POSITION,
    PRE_BLANK_SIZE,
    QUEUE_ID_POSITION,
    QUEUE_OFFSET_POSITION,
    RECORD_HEADER_V4,
    STORE_HOST_POSITION_V4,
    STOREHOSTADDRESS_V6_FLAG,
    SYSFLAG_POSITION,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    body_crc,
    is_dispatchable,
    pack_rows,
    record_header_struct,
    rows_struct,
    store_host_position,
    store_timestamp_position,
    topic_length_width,
)
from tests.storage.record.golden import (
    BODY,
    GOLDEN_V2,
    PROPERTIES_BYTES,
    golden_message,
    golden_record,
    to_v2,
)

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


def test_body_crc_is_masked_to_31_bits() -> None:
    # zlib.crc32(b"a") = 0xE8B7BE43 has the top bit set; the mask clears it.
    assert zlib.crc32(b"a") == 0xE8B7BE43
    assert body_crc(b"a") == 0x68B7BE43
    assert body_crc(b"") == 0
    record = encode_message(golden_message(body=b"a"))
    assert struct.unpack_from(">i", record, 8)[0] == 0x68B7BE43


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


def test_named_positions_are_the_reference_offsets() -> None:
    assert (
        BODY_CRC_POSITION,
        QUEUE_ID_POSITION,
        QUEUE_OFFSET_POSITION,
        PHYSICAL_OFFSET_POSITION,
        SYSFLAG_POSITION,
        BORN_HOST_POSITION,
    ) == (8, 12, 20, 28, 36, 48)
    assert (RECORD_HEADER_V4.size, BODY_LENGTH_POSITION_V4, FIXED_OVERHEAD_V4) == (88, 84, 91)
    assert FIXED_FIELDS_V4.size == RECORD_HEADER_V4.size
    assert STORE_HOST_POSITION_V4 == 64
    assert HEAD_TO_SYSFLAG.size == SYSFLAG_POSITION + 4
    assert MIN_RECORD_SIZE == {MESSAGE_MAGIC_CODE: 91, MESSAGE_MAGIC_CODE_V2: 92}


@pytest.mark.parametrize(
    ("sys_flag", "header", "store_timestamp_at", "store_host_at"),
    [
        pytest.param(0, 88, 56, 64, id="v4"),
        pytest.param(BORNHOST_V6_FLAG, 100, 68, 76, id="born-v6"),
        pytest.param(STOREHOSTADDRESS_V6_FLAG, 100, 56, 64, id="store-v6"),
        pytest.param(HOST_V6_BITS | 0x3, 112, 68, 76, id="both-v6-other-bits"),
    ],
)
def test_host_widths_select_the_header(
    sys_flag: int, header: int, store_timestamp_at: int, store_host_at: int
) -> None:
    assert record_header_struct(sys_flag).size == header
    assert store_timestamp_position(sys_flag) == store_timestamp_at
    assert store_host_position(sys_flag) == store_host_at


def test_only_prepared_and_rolled_back_halves_are_not_dispatchable() -> None:
    assert is_dispatchable(TRANSACTION_NOT_TYPE | BORNHOST_V6_FLAG)
    assert is_dispatchable(TRANSACTION_COMMIT_TYPE)
    assert not is_dispatchable(TRANSACTION_PREPARED_TYPE)
    assert not is_dispatchable(TRANSACTION_ROLLBACK_TYPE | 0x1)


def test_the_topic_length_is_a_byte_in_v1_and_a_short_in_v2() -> None:
    assert topic_length_width(MESSAGE_MAGIC_CODE) == 1
    assert topic_length_width(MESSAGE_MAGIC_CODE_V2) == 2


def test_blank_and_pre_blank_fillers() -> None:
    assert BLANK_STRUCT.size == END_FILE_MIN_BLANK_LENGTH == 8
    assert CQ_UNIT_STRUCT.unpack(CQ_UNIT_STRUCT.pack(0, PRE_BLANK_SIZE, 0))[1] == 2**31 - 1


def test_the_fixed_fields_are_the_header_without_the_skipped_ones() -> None:
    record = golden_record()
    header = RECORD_HEADER_V4.unpack_from(record)
    shown = (0, 1, 3, 5, 6, 7, 8, 11, 14, 16)  # all but CRC, FLAG, the hosts, PREPARED
    (*numbers, store_host, reconsume_times, body_length) = FIXED_FIELDS_V4.unpack_from(record)
    assert (*numbers, reconsume_times, body_length) == tuple(header[i] for i in shown)
    assert store_host.to_bytes(8, "big") == header[12] + header[13].to_bytes(4, "big")


_ROWS = st.lists(
    st.tuples(
        st.integers(0, 2**63 - 1),
        st.integers(-(2**31), 2**31 - 1),
        st.integers(-(2**63), 2**63 - 1),
    ),
    max_size=30,
)


@given(_ROWS)
def test_rows_pack_as_each_row_packed_and_joined(rows: list[tuple[int, int, int]]) -> None:
    columns = [[row[i] for row in rows] for i in range(3)]
    assert pack_rows(CQ_UNIT_STRUCT, columns) == b"".join(map(CQ_UNIT_STRUCT.pack, *columns))


def test_a_row_out_of_range_is_a_struct_error() -> None:
    with pytest.raises(struct.error):
        pack_rows(CQ_UNIT_STRUCT, [[2**63], [1], [0]])


def test_rows_without_a_byte_order_are_refused() -> None:
    with pytest.raises(ValueError, match="aligned"):
        rows_struct(struct.Struct("iq"), 2)
    assert rows_struct(CQ_UNIT_STRUCT, 2).size == 2 * CQ_UNIT_STRUCT.size

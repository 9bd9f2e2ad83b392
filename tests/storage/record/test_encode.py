"""encode: records byte for byte (IPv4 and IPv6 hosts), what is refused, whole batches."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from storage.errors import (
    InvalidTopicError,
    MessageRejectedError,
    MessageTooLargeError,
    PropertiesTooLargeError,
)
from storage.record.decode import RecordKind, check_record, decode_record, read_store_timestamp
from storage.record.encode import (
    EncodedBatch,
    EncodedMessage,
    blank_record,
    check_batch,
    encode_message,
)
from storage.record.java_hash import tags_code
from storage.record.layout import BLANK_MAGIC_CODE, CQ_UNIT_STRUCT
from storage.record.message import Message
from tests.storage.record.golden import (
    BODY,
    GOLDEN_HEX,
    KEYED_PROPERTIES,
    KEYS,
    V6_BORN,
    V6_STORE,
    golden_message,
    golden_record,
    packed,
)

# ---------------------------------------------------------------- the golden record


def test_golden_record_is_158_bytes_exactly_as_written_by_hand() -> None:
    record = golden_record()
    assert len(record) == 158 == 91 + 32 + 6 + 29
    assert record.hex() == GOLDEN_HEX


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
    assert (born_address, born_port) == (packed(born[0]), born[1])
    assert struct.unpack_from(">q", record, store_ts_at)[0] == 2222
    store_address, store_port = struct.unpack_from(f">{store_len}si", record, store_host_at)
    assert (store_address, store_port) == (packed(store[0]), store[1])
    assert struct.unpack_from(">i", record, body_at - 4)[0] == 32
    assert record[body_at : body_at + 32] == BODY
    assert record[body_at + 32] == 6
    assert read_store_timestamp(record) == 2222
    assert check_record(record, 0, len(record), check_crc=True).kind is RecordKind.MESSAGE
    stored = decode_record(record)
    assert (stored.born_host, stored.store_host) == (born, store)
    assert stored.sys_flag == sys_flag
    assert stored.body == BODY


def test_v6_flags_from_the_caller_are_replaced_by_the_real_host_widths() -> None:
    # A caller-supplied sysFlag claiming IPv6 hosts must not corrupt an IPv4 record.
    record = encode_message(golden_message(sys_flag=0x30 | 0x2))
    assert struct.unpack_from(">i", record, 36)[0] == 0x2
    assert len(record) == 158


def test_encoded_message_carries_tags_code_and_keys() -> None:
    encoded = EncodedMessage(golden_message(), store_v6=False, max_body_size=1024)
    assert encoded.tags_code == 2567159
    assert encoded.keys == KEYS
    assert encoded.size == 158


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


@pytest.mark.parametrize("topic", ["", "a" * 128, "a b", "abc\n"])
def test_a_topic_that_is_not_a_valid_name_is_refused(topic: str) -> None:
    with pytest.raises(InvalidTopicError):
        EncodedMessage(golden_message(topic=topic), store_v6=False, max_body_size=64)
    with pytest.raises(InvalidTopicError):
        EncodedBatch([golden_message(topic=topic)], store_v6=False, max_body_size=64)


def test_keyed_records_carry_their_idempotency_key_for_the_index() -> None:
    keyed = golden_message(properties=KEYED_PROPERTIES)
    assert EncodedMessage(keyed, False, 4096).idempotency_key == "order-17"
    assert EncodedMessage(golden_message(), False, 4096).idempotency_key is None
    batch = EncodedBatch([golden_message(), keyed, keyed], False, 4096)
    assert batch.idempotency_keys == [(1, "order-17"), (2, "order-17")]


def test_blank_record_fills_the_rest_of_a_file() -> None:
    assert blank_record(3996) == struct.pack(">ii", 3996, BLANK_MAGIC_CODE)

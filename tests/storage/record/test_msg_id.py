"""msg_id: the offsetMsgId of IPv4 and IPv6 store hosts, both ways."""

from __future__ import annotations

import pytest

from storage.record.msg_id import (
    MessageId,
    decode_msg_id,
    encode_host,
    encode_msg_id,
    msg_id_prefix,
    store_host_number_prefix,
    store_host_prefix,
)


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


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "::1", "fe80::1"])
def test_the_prefix_of_a_store_host_field_is_the_prefix_of_its_host(host: str) -> None:
    field = encode_host(host) + (10911).to_bytes(4, "big")  # STOREHOSTADDRESS: address + port
    assert store_host_prefix(field) == msg_id_prefix(host, 10911)
    assert store_host_prefix(field) == msg_id_prefix(host, 10911)  # memoised, the same


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "255.255.255.255"])
@pytest.mark.parametrize("port", [0, 10911, 2**31 - 1])
def test_the_prefix_of_a_store_host_number_is_the_prefix_of_its_host(host: str, port: int) -> None:
    field = encode_host(host) + port.to_bytes(4, "big")  # STOREHOSTADDRESS: address + port
    number = int.from_bytes(field, "big")  # the field read as one unsigned 8-byte number
    assert store_host_number_prefix(number) == msg_id_prefix(host, port)
    assert store_host_number_prefix(number) == store_host_prefix(field)  # memoised, the same

"""RocketMQ's offsetMsgId: the store host's address and port and the record's physical
offset, as uppercase hex (32 characters for an IPv4 store host, 56 for IPv6).

Also the address bytes of the BORNHOST and STOREHOSTADDRESS fields, both ways.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from storage.record.layout import INT64_MAX, INT64_MIN, INT_STRUCT, UINT64_MASK

_IPV4_ID_LENGTH: Final = 32
_IPV6_ID_LENGTH: Final = 56
_MAX_REMEMBERED_HOSTS: Final = 4096


@lru_cache(maxsize=256)
def encode_host(host: str) -> bytes:
    """The 4 or 16 address bytes of an IP literal."""
    return ipaddress.ip_address(host).packed


HOST_NAMES: Final[dict[bytes, str]] = {}
"""Address bytes → IP literal, for the hosts already seen (read-only outside this module)."""


def decode_host(address: bytes) -> str:
    """The IP literal of 4 or 16 address bytes (memoised: a store sees few distinct hosts)."""
    name = HOST_NAMES.get(address)
    if name is None:
        name = str(ipaddress.ip_address(address))
        if len(HOST_NAMES) < _MAX_REMEMBERED_HOSTS:
            HOST_NAMES[address] = name
    return name


@lru_cache(maxsize=256)
def msg_id_prefix(store_host: str, store_port: int) -> str:
    """The part of every offsetMsgId of one store before the offset: address + port, hex.

    A msgId is this prefix followed by the physical offset as 16 uppercase hex digits
    (``prefix + f"{offset:016X}"``), which is how :func:`encode_msg_id` builds it.

    >>> msg_id_prefix("127.0.0.1", 10911)
    '7F00000100002A9F'
    """
    return (encode_host(store_host) + INT_STRUCT.pack(store_port)).hex().upper()


STORE_HOST_PREFIXES: Final[dict[bytes, str]] = {}
"""STOREHOSTADDRESS bytes (address + port) → :func:`store_host_prefix` of them, for the hosts
already seen (read-only outside this module): a store has one or two."""


def store_host_prefix(address_and_port: bytes) -> str:
    """:func:`msg_id_prefix` of the STOREHOSTADDRESS field's bytes as a record holds them
    (memoised: a reader looks it up for every record).

    >>> store_host_prefix(bytes([127, 0, 0, 1, 0, 0, 0x2A, 0x9F]))
    '7F00000100002A9F'
    """
    prefix = STORE_HOST_PREFIXES.get(address_and_port)
    if prefix is None:
        prefix = address_and_port.hex().upper()
        if len(STORE_HOST_PREFIXES) < _MAX_REMEMBERED_HOSTS:
            STORE_HOST_PREFIXES[address_and_port] = prefix
    return prefix


STORE_HOST_NUMBER_PREFIXES: Final[dict[int, str]] = {}
"""The STOREHOSTADDRESS field of an IPv4 store host read as one unsigned 8-byte number →
:func:`store_host_number_prefix` of it, for the hosts already seen (read-only outside this
module)."""


def store_host_number_prefix(address_and_port: int) -> str:
    """:func:`store_host_prefix` of an IPv4 STOREHOSTADDRESS field read as one unsigned
    big-endian 8-byte number (memoised: a reader looks it up for every record).

    >>> store_host_number_prefix(0x7F00000100002A9F)
    '7F00000100002A9F'
    """
    prefix = STORE_HOST_NUMBER_PREFIXES.get(address_and_port)
    if prefix is None:
        prefix = f"{address_and_port:016X}"
        if len(STORE_HOST_NUMBER_PREFIXES) < _MAX_REMEMBERED_HOSTS:
            STORE_HOST_NUMBER_PREFIXES[address_and_port] = prefix
    return prefix


def encode_msg_id(store_host: str, store_port: int, physical_offset: int) -> str:
    """RocketMQ's offsetMsgId: hex of store address + port + physical offset, uppercase.

    >>> encode_msg_id("127.0.0.1", 10911, 0)
    '7F00000100002A9F0000000000000000'
    """
    if not INT64_MIN <= physical_offset <= INT64_MAX:
        raise ValueError(f"a physical offset is a long, not {physical_offset}")
    # A negative long as its two's complement, as Java (and struct ">q") write it.
    return msg_id_prefix(store_host, store_port) + f"{physical_offset & UINT64_MASK:016X}"


@dataclass(frozen=True, slots=True)
class MessageId:
    """A decoded offsetMsgId."""

    store_host: str
    store_port: int
    physical_offset: int


def decode_msg_id(msg_id: str) -> MessageId:
    """Decode an offsetMsgId (32 hex chars for IPv4, 56 for IPv6); ``ValueError`` if malformed."""
    if len(msg_id) not in (_IPV4_ID_LENGTH, _IPV6_ID_LENGTH):
        raise ValueError(f"a message id has 32 or 56 hex characters, not {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    if len(raw) * 2 != len(msg_id):  # fromhex skips whitespace
        raise ValueError("a message id has hex digits only")
    address_length = 4 if len(msg_id) == _IPV4_ID_LENGTH else 16
    port, offset = struct.unpack_from(">iq", raw, address_length)
    return MessageId(decode_host(raw[:address_length]), port, offset)

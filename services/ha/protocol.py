"""The HA wire format (RocketMQ's HAConnection, plus a name so the master knows its slaves,
and a challenge a slave answers with its replication token).

Slave → master: once ``u16 length + UTF-8 name``, then 8-byte max-offset reports (on
connect, every heartbeat, after each batch it appends). Master → slave: frames of a header
{phyOffset 8 B, bodySize 4 B} and ``bodySize`` bytes. A frame at ``phyOffset >= 0`` carries
raw CommitLog bytes from that offset (a body size of 0 is a heartbeat); two control frames
carry a negative offset:

- ``CHALLENGE`` (-1), a master with an auth file, right after the slave's first report: a
  32-byte random nonce. The slave answers with 32 bytes,
  ``HMAC-SHA256(SHA-256(token), nonce + "spoolmq-ha/1 slave " + name)`` (the token never
  travels; the key is its SHA-256, what the master's auth file holds: an admin token's).
  Nothing of the CommitLog is sent before a proof matches.
- ``REFUSED`` (-2): why the master closes the connection (UTF-8), its last frame: a proof
  that does not match, none within :data:`PROOF_TIMEOUT_S`, a slave past the master's end.

A slave's name and first report, and its proof, are each due within
:data:`PROOF_TIMEOUT_S` of what comes before them. A master without an auth file sends no
challenge: any slave that reaches the port streams (keep the port on loopback or a private
network then). Over TLS (``--tls-cert``) the same bytes travel inside the TLS session.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Final

OFFSET_REPORT: Final = struct.Struct(">q")
TRANSFER_HEADER: Final = struct.Struct(">qi")
CHALLENGE: Final = -1
REFUSED: Final = -2
NONCE_BYTES: Final = 32
PROOF_BYTES: Final = 32
PROOF_TIMEOUT_S: Final = 10.0
MAX_REASON_BYTES: Final = 1024
_NAME_LENGTH: Final = struct.Struct(">H")


def hello(name: str) -> bytes:
    encoded = name.encode()
    return _NAME_LENGTH.pack(len(encoded)) + encoded


async def read_hello(reader: asyncio.StreamReader) -> str:
    (length,) = _NAME_LENGTH.unpack(await reader.readexactly(_NAME_LENGTH.size))
    return (await reader.readexactly(length)).decode(errors="replace")


async def read_offset(reader: asyncio.StreamReader) -> int:
    return int(OFFSET_REPORT.unpack(await reader.readexactly(OFFSET_REPORT.size))[0])


def challenge(nonce: bytes) -> bytes:
    return TRANSFER_HEADER.pack(CHALLENGE, len(nonce)) + nonce


def refusal(reason: str) -> bytes:
    encoded = reason.encode()[:MAX_REASON_BYTES]
    return TRANSFER_HEADER.pack(REFUSED, len(encoded)) + encoded

"""The HA wire format (RocketMQ's HAConnection, plus a name so the master knows its slaves).

Slave → master: once ``u16 length + UTF-8 name``, then 8-byte max-offset reports (on
connect, every heartbeat, after each batch it appends). Master → slave: a header
{phyOffset 8 B, bodySize 4 B} and ``bodySize`` raw CommitLog bytes; a body size of 0 is a
heartbeat.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Final

OFFSET_REPORT: Final = struct.Struct(">q")
TRANSFER_HEADER: Final = struct.Struct(">qi")
_NAME_LENGTH: Final = struct.Struct(">H")


def hello(name: str) -> bytes:
    encoded = name.encode()
    return _NAME_LENGTH.pack(len(encoded)) + encoded


async def read_hello(reader: asyncio.StreamReader) -> str:
    (length,) = _NAME_LENGTH.unpack(await reader.readexactly(_NAME_LENGTH.size))
    return (await reader.readexactly(length)).decode(errors="replace")


async def read_offset(reader: asyncio.StreamReader) -> int:
    return int(OFFSET_REPORT.unpack(await reader.readexactly(OFFSET_REPORT.size))[0])

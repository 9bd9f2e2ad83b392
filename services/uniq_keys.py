"""Client-style message ids: the UNIQ_KEY a send gives each message it stores."""

from __future__ import annotations

import ipaddress
import itertools
import operator
import os
import secrets
import socket
import struct
import time
from collections.abc import Iterable


class UniqKeyGenerator:
    """RocketMQ client-style message ids (``MessageClientIDSetter``): 32 uppercase hex chars.

    Layout: IPv4 address (4 bytes) + pid (2) + a per-process random number (4) + ms since the
    start of the month (4) + a counter (2).
    """

    def __init__(self, host: str | None = None) -> None:
        address = _ipv4_bytes(host)
        prefix = address + (os.getpid() & 0xFFFF).to_bytes(2, "big") + secrets.token_bytes(4)
        self._prefix = prefix.hex().upper()
        self._counter = secrets.randbelow(0x10000)  # the next one's (low 16 bits)
        self._month_start_ms = 0
        self._month_end_ms = 0

    def next(self) -> str:
        """One id (:meth:`next_many` of one, without the list: a single send takes one)."""
        now = time.time_ns() // 1_000_000
        if not self._month_start_ms <= now < self._month_end_ms:
            self._set_month(now)
        counter = self._counter
        self._counter = (counter + 1) & 0xFFFF
        return f"{self._prefix}{(now - self._month_start_ms) & 0xFFFFFFFF:08X}{counter:04X}"

    def next_many(self, count: int) -> list[str]:
        """``count`` ids of one millisecond: the head is formatted once, the counters by one
        ``hex`` over their packed bytes, and the ids cut from one string (no call per id)."""
        if count == 1:
            return [self.next()]
        now = time.time_ns() // 1_000_000
        if not self._month_start_ms <= now < self._month_end_ms:
            self._set_month(now)
        head = f"{self._prefix}{(now - self._month_start_ms) & 0xFFFFFFFF:08X}"
        start = self._counter
        self._counter = (start + count) & 0xFFFF
        if count <= 0:
            return []
        counters: Iterable[int] = range(start, start + count)
        if start + count > 0x10000:  # wraps at 16 bits
            counters = map(operator.and_, counters, itertools.repeat(0xFFFF))
        tails = struct.pack(f">{count}H", *counters).hex(",", 2).upper()
        return (head + tails.replace(",", "," + head)).split(",")  # hex ids: no comma in one

    def _set_month(self, now_ms: int) -> None:
        year, month = time.localtime(now_ms / 1000)[:2]
        start = time.mktime((year, month, 1, 0, 0, 0, 0, 0, -1))
        next_year, next_month = (year + 1, 1) if month == 12 else (year, month + 1)
        end = time.mktime((next_year, next_month, 1, 0, 0, 0, 0, 0, -1))
        self._month_start_ms, self._month_end_ms = int(start * 1000), int(end * 1000)


def _ipv4_bytes(host: str | None) -> bytes:
    try:
        address = ipaddress.ip_address(host or socket.gethostbyname(socket.gethostname()))
    except (OSError, ValueError):
        address = ipaddress.IPv4Address("127.0.0.1")
    return address.packed[-4:]

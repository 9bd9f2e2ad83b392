"""UniqKeyGenerator: RocketMQ client-style message ids."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

import services.uniq_keys
from services.uniq_keys import UniqKeyGenerator


def test_uniq_keys_are_32_uppercase_hex_and_distinct() -> None:
    generator = UniqKeyGenerator("10.0.0.7")
    keys = [generator.next() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9A-F]{32}", k) for k in keys)
    assert len(set(keys)) == 1000
    assert keys[0].startswith("0A000007")


def test_the_counter_runs_on_across_calls_and_wraps_at_16_bits() -> None:
    generator = UniqKeyGenerator("10.0.0.7")
    generator._counter = 0xFFFE
    keys = [*generator.next_many(3), generator.next()]
    assert [k[-4:] for k in keys] == ["FFFE", "FFFF", "0000", "0001"]
    assert len({k[:-4] for k in keys[:3]}) == 1  # one millisecond's head, formatted once


class _StoppedClock:
    """The ``time`` module with ``time_ns`` stopped."""

    now_ns = time.time_ns()

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def time_ns(self) -> int:
        return self.now_ns


def test_one_id_is_what_a_batch_of_one_would_be(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services.uniq_keys, "time", _StoppedClock())  # one millisecond
    one, many = UniqKeyGenerator("10.0.0.7"), UniqKeyGenerator("10.0.0.7")
    many._prefix = one._prefix  # the same per-process random part
    for counter in (0, 0x1234, 0xFFFF):
        one._counter = many._counter = counter
        assert [one.next(), one.next()] == many.next_many(2)
        assert one._counter == many._counter

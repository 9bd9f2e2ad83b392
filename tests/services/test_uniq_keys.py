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


def _format_many(generator: UniqKeyGenerator, count: int, clock: _StoppedClock) -> list[str]:
    """The ids ``next_many`` made before it cut them from one string: one format each."""
    now = clock.time_ns() // 1_000_000
    if not generator._month_start_ms <= now < generator._month_end_ms:
        generator._set_month(now)
    head = f"{generator._prefix}{(now - generator._month_start_ms) & 0xFFFFFFFF:08X}"
    start = generator._counter
    generator._counter = (start + count) & 0xFFFF
    return [f"{head}{counter & 0xFFFF:04X}" for counter in range(start, start + count)]


@pytest.mark.parametrize("counter", [0, 0x1234, 0xFF9C, 0xFFFF])
@pytest.mark.parametrize("count", [0, 1, 2, 100, 0x10001])
def test_many_ids_are_as_many_single_ids_across_the_16_bit_wrap(
    monkeypatch: pytest.MonkeyPatch, counter: int, count: int
) -> None:
    monkeypatch.setattr(services.uniq_keys, "time", _StoppedClock())  # one millisecond
    one, many = UniqKeyGenerator("10.0.0.7"), UniqKeyGenerator("10.0.0.7")
    many._prefix = one._prefix
    one._counter = many._counter = counter
    assert many.next_many(count) == [one.next() for _ in range(count)]
    assert many._counter == one._counter == (counter + count) & 0xFFFF


def test_many_ids_follow_the_clock_across_seconds_and_months(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _StoppedClock()
    monkeypatch.setattr(services.uniq_keys, "time", clock)
    one, many, formatted = (UniqKeyGenerator("10.0.0.7") for _ in range(3))
    many._prefix = formatted._prefix = one._prefix
    month_end_ns = int(time.mktime((2026, 12, 1, 0, 0, 0, 0, 0, -1)) * 1e9)
    instants = [month_end_ns - 1_000_000_000, month_end_ns - 1_000_000, month_end_ns]
    instants += [month_end_ns + 999_000_000, month_end_ns + 1_000_000_000]  # a second on
    for now_ns in instants:
        clock.now_ns = now_ns
        one._counter = many._counter = formatted._counter = 0xFFFE
        singles = [one.next() for _ in range(5)]
        assert many.next_many(5) == singles == _format_many(formatted, 5, clock)
        assert many._month_start_ms == one._month_start_ms

"""UniqKeyGenerator: RocketMQ client-style message ids."""

from __future__ import annotations

import re

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

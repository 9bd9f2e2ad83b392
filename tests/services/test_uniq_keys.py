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

"""The columns a batch's answer is rendered from (``app.schemas.sent_columns``): each helper
gives what the per-value formatting it replaces gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.schemas.sent_columns import decimals, offset_hex


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40))
def test_offset_hex_is_each_offset_in_16_uppercase_hex_digits(offsets: list[int]) -> None:
    assert offset_hex(offsets) == [f"{offset:016X}" for offset in offsets]


@given(st.lists(st.integers(-(2**63), 2**64 - 1), max_size=40))
def test_decimals_are_each_number_as_str_renders_it(numbers: list[int]) -> None:
    assert decimals(numbers) == list(map(str, numbers))

"""java_hash: Java's String.hashCode over UTF-16 code units, the tags code, int32 wrapping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.record.java_hash import (
    java_string_hash,
    java_string_hash_after,
    tags_code,
    to_int32,
)

JAVA_HASHES = [
    pytest.param("TAG1", 2567159, id="TAG1"),
    pytest.param("TagA", 2598919, id="TagA"),
    pytest.param("", 0, id="empty"),
    pytest.param("hello", 99162322, id="hello"),
    pytest.param("Hello World", -862545276, id="negative"),
    pytest.param("polygenelubricants", -(2**31), id="int32-min-wrap"),
    pytest.param("é", 0xE9, id="latin1"),
    pytest.param("日本", 0x65E5 * 31 + 0x672C, id="cjk"),
    # U+1F600 is the surrogate pair D83D DE00 in UTF-16.
    pytest.param("\U0001f600", 0xD83D * 31 + 0xDE00, id="astral-surrogates"),
]


@pytest.mark.parametrize(("text", "expected"), JAVA_HASHES)
def test_java_string_hash(text: str, expected: int) -> None:
    assert java_string_hash(text) == expected


def _reference_java_hash(text: str) -> int:
    """The textbook loop over UTF-16 code units, wrapped to a signed int32."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("key-0000012345", id="index-key"),
        pytest.param("a" * 1024, id="1024-ascii"),
        pytest.param("a" * 1025, id="1025-ascii"),
        pytest.param("é" * 1500, id="long-latin1"),
        pytest.param("x\U0001f600" * 700, id="long-astral"),
        pytest.param("Zz9" * 3000, id="9000-chars"),
    ],
)
def test_java_string_hash_of_long_and_mixed_strings(text: str) -> None:
    assert java_string_hash(text) == _reference_java_hash(text)


@pytest.mark.parametrize(
    ("head", "tail"),
    [
        pytest.param("Orders#\x01", "order-42-paid", id="idempotency-key"),
        pytest.param("", "", id="empty"),
        pytest.param("T#\x01", "", id="empty-tail"),
        pytest.param("", "polygenelubricants", id="empty-head"),
        pytest.param("日本#\x01", "é\U0001f600", id="astral-tail"),
        pytest.param("T#\x01", "a" * 1024, id="1024-tail"),
        pytest.param("T#\x01", "k" * 1025, id="1025-tail"),
        pytest.param("T#\x01", "x\U0001f600" * 600, id="long-astral-tail"),
    ],
)
def test_the_hash_after_a_head_is_the_hash_of_the_whole(head: str, tail: str) -> None:
    assert java_string_hash_after(java_string_hash(head), tail) == _reference_java_hash(head + tail)


def test_tags_code_is_zero_without_a_tag_and_the_java_hash_otherwise() -> None:
    assert tags_code(None) == 0
    assert tags_code("") == 0
    assert tags_code("TagA") == 2598919
    assert tags_code("Hello World") == -862545276  # negative: sign-extended in the CQ unit


def test_to_int32_keeps_the_low_32_bits_signed() -> None:
    assert to_int32(-862545276) == -862545276
    assert to_int32(0xFFFFFFFF) == -1
    assert to_int32(2**32 + 5) == 5


@given(
    st.integers(min_value=-(2**31), max_value=2**32 - 1),
    st.text(st.characters(max_codepoint=127), max_size=700),
)
def test_a_value_hashed_after_a_prefix_hash_is_the_whole_string_hashed(
    prefix_hash: int, value: str
) -> None:
    """ASCII values of every length (base-31 digits up to 600 characters, products past it)
    hash as the textbook loop hashes them after a prefix of that hash."""
    expected = (prefix_hash * pow(31, len(value), 1 << 32) + _reference_java_hash(value)) & (
        0xFFFFFFFF
    )
    assert java_string_hash_after(prefix_hash, value) & 0xFFFFFFFF == expected
    assert java_string_hash_after(prefix_hash, value) == to_int32(expected)


@pytest.mark.parametrize("length", [0, 1, 599, 600, 601, 1024, 1025])
def test_the_hash_after_a_prefix_at_each_length_edge(length: int) -> None:
    value = "".join(chr(0x7F - n % 0x60) for n in range(length))  # DEL and downwards
    prefix = "Orders#\x01"
    assert java_string_hash_after(java_string_hash(prefix), value) == _reference_java_hash(
        prefix + value
    )


@given(st.text(st.characters(max_codepoint=127), max_size=700))
def test_an_ascii_string_hashes_as_the_textbook_loop(value: str) -> None:
    """Base-31 digits up to 600 characters, products past it: the same hash."""
    assert java_string_hash(value) == _reference_java_hash(value)

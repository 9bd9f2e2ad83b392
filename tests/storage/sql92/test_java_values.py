"""Java's conversions of a property's string, and the order RocketMQ compares values in."""

from __future__ import annotations

import math

import pytest

from storage.sql92.java_values import (
    Unconvertible,
    compare,
    java_boolean,
    java_double,
    java_long,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [("10", 10), ("010", 10), ("+7", 7), ("-7", -7), ("9223372036854775807", 2**63 - 1)],
)
def test_long_valueof(text: str, value: int) -> None:
    assert java_long(text) == value


@pytest.mark.parametrize(
    "text", ["", "+", "10.0", " 10", "1e3", "0x10", "9223372036854775808", "ten"]
)
def test_long_valueof_refuses(text: str) -> None:
    with pytest.raises(Unconvertible):
        java_long(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10", 10.0),
        ("10.", 10.0),
        (".5", 0.5),
        (" 2.5\t", 2.5),
        ("1e3", 1000.0),
        ("-1.5E-1", -0.15),
        ("2.5f", 2.5),
        ("2d", 2.0),
        ("Infinity", math.inf),
        ("-Infinity", -math.inf),
        ("0x1p3", 8.0),
        ("1e400", math.inf),
    ],
)
def test_double_valueof(text: str, value: float) -> None:
    assert java_double(text) == value


@pytest.mark.parametrize("text", ["", ".", "1e", "inf", "nan", "1_000", "ten", "0x10"])
def test_double_valueof_refuses(text: str) -> None:
    with pytest.raises(Unconvertible):
        java_double(text)


def test_double_valueof_nan() -> None:
    assert math.isnan(java_double("NaN"))


def test_boolean_valueof_never_fails() -> None:
    assert [java_boolean(t) for t in ("true", "TRUE", "True", "yes", "1", "")] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]


def test_a_string_is_converted_to_the_other_side_type() -> None:
    assert compare("010", 10) == 0
    assert compare(10, "9") == 1
    assert compare("2.5", 2.0) == 1
    assert compare("true", True) == 0
    assert compare(True, "no") == 1
    with pytest.raises(Unconvertible):
        compare("10.0", 10)


def test_longs_and_doubles_compare_as_doubles_booleans_with_numbers_never() -> None:
    assert compare(10, 10.0) == 0
    assert compare(2.5, 3) == -1
    assert compare(True, 1) == -1


def test_double_order_is_java_compare_to() -> None:
    """NaN above everything and equal to itself, -0.0 below 0.0."""
    assert compare(math.nan, math.inf) == 1
    assert compare(math.nan, math.nan) == 0
    assert compare(-0.0, 0.0) == -1
    assert compare("NaN", 1.0) == 1

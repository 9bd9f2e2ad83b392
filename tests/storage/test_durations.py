"""The one duration format of the admin pages and the Spark reports."""

from __future__ import annotations

import math

import pytest

from storage.durations import format_duration, format_millis


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0 s"),
        (0.9, "0 s"),  # whole seconds, rounded down: never older than it is
        (42.7, "42 s"),
        (59.99, "59 s"),
        (60, "1 min"),
        (185, "3 min 5 s"),
        (3599, "59 min 59 s"),
        (3600, "1 h"),
        (2 * 3600 + 10 * 60 + 59, "2 h 10 min"),
        (86_399, "23 h 59 min"),
        (86_400, "1 d"),
        (3 * 86_400 + 4 * 3600 + 59, "3 d 4 h"),
        (-3, "0 s"),
        (None, "—"),
        (math.nan, "—"),
        (math.inf, "—"),
    ],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("milliseconds", "text"),
    [
        (0, "0 ms"),
        (2.54, "2.5 ms"),
        (7, "7 ms"),
        (849.6, "850 ms"),
        (1000, "1.00 s"),
        (12_345, "12.35 s"),
        (60_000, "1 min"),
        (185_400, "3 min 5 s"),
        (-5, "0 ms"),
        (None, "—"),
        (math.inf, "—"),
    ],
)
def test_format_millis(milliseconds: float | None, text: str) -> None:
    assert format_millis(milliseconds) == text

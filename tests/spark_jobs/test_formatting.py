"""formatting: numbers, rates and times as the reports print them."""

from __future__ import annotations

import pytest

from spark_jobs.formatting import (
    format_count,
    format_number,
    format_per_second,
    format_rate,
    format_time,
)


@pytest.mark.parametrize(
    ("rate", "text"),
    [(None, "—"), (0.0, "0.0"), (0.04, "0.04"), (0.0012, "0.0012"), (12.34, "12.3")],
)
def test_a_slow_rate_never_reads_as_zero(rate: float | None, text: str) -> None:
    assert format_per_second(rate) == text


def test_times_counts_and_numbers() -> None:
    assert format_time(1_714_564_800_000) == "2024-05-01 12:00:00 UTC"
    assert format_time(1_714_564_800_000, suffix=False) == "2024-05-01 12:00:00"
    assert (format_time(None), format_count(None), format_rate(None)) == ("—", "—", "—")
    assert (format_count(1234567), format_rate(12.345), format_number(1234.56)) == (
        "1,234,567",
        "12.3 msg/s",
        "1,234.6",
    )
    assert format_number(2.5, digits=0) == "2"

"""The one parser of points in time: epoch ms or ISO 8601."""

from __future__ import annotations

import pytest

from storage.timestamps import parse_timestamp_ms

MAY_1 = 1714521600000  # 2024-05-01T00:00:00Z


@pytest.mark.parametrize(
    "text",
    [
        "1714521600000",
        "2024-05-01",
        "2024-05-01T00:00:00Z",
        "2024-05-01T00:00:00z",
        "2024-05-01T00:00:00",
        "2024-05-01T02:00:00+02:00",
        "2024-05-01T00:00:00.000Z",
    ],
)
def test_epoch_ms_and_iso_8601_read_the_same(text: str) -> None:
    assert parse_timestamp_ms(text) == MAY_1


def test_milliseconds_are_kept() -> None:
    assert parse_timestamp_ms("2024-05-01T00:00:00.250Z") == MAY_1 + 250


@pytest.mark.parametrize("text", ["", " 1", "yesterday", "2024-13-01", "1e3", "12:00"])
def test_anything_else_says_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="epoch milliseconds or ISO 8601"):
        parse_timestamp_ms(text)

"""The one lag definition: messages between position and max offset, age of the oldest."""

from __future__ import annotations

import pytest

from storage.lag_model import (
    NOT_COMMITTED,
    LagFigures,
    age_seconds,
    consume_position,
    lag_in_messages,
    oldest_unconsumed_offset,
    queue_lag_figures,
)

NOW = 1_720_000_100_000


def store_times(first_offset: int, first_ms: int) -> dict[int, int]:
    """Offsets first_offset.. stored one second apart from first_ms."""
    return {first_offset + i: first_ms + i * 1000 for i in range(100)}


@pytest.mark.parametrize(
    ("committed", "min_offset", "max_offset", "lag", "oldest"),
    [
        (4, 0, 10, 6, 4),  # ordinary backlog
        (10, 0, 10, 0, None),  # caught up
        (12, 0, 10, 0, None),  # past the max (a store cut back): no lag
        (2, 5, 10, 8, 5),  # expired messages still count; the oldest stored one is at min
        (NOT_COMMITTED, 3, 10, 7, 3),  # never committed: the group starts at the min offset
        (NOT_COMMITTED, 0, 0, 0, None),  # empty queue
        (0, 0, 0, 0, None),
    ],
)
def test_lag_in_messages_and_the_oldest_unconsumed_offset(
    committed: int, min_offset: int, max_offset: int, lag: int, oldest: int | None
) -> None:
    assert lag_in_messages(committed, min_offset, max_offset) == lag
    assert oldest_unconsumed_offset(committed, min_offset, max_offset) == oldest


def test_position_is_the_committed_offset_else_the_min() -> None:
    assert consume_position(7, 3) == 7
    assert consume_position(1, 3) == 1
    assert consume_position(NOT_COMMITTED, 3) == 3


def test_lag_seconds_is_the_age_of_the_oldest_unconsumed_message() -> None:
    times = store_times(0, NOW - 60_000)
    read: list[int] = []

    def store_time_at(offset: int) -> int | None:
        read.append(offset)
        return times.get(offset)

    figures = queue_lag_figures(4, 0, 10, store_time_at, NOW)
    assert figures == LagFigures(lag=6, lag_seconds=56.0, oldest_unconsumed_ms=NOW - 56_000)
    assert read == [4]


def test_below_the_min_the_age_is_taken_from_the_first_message_left() -> None:
    times = store_times(5, NOW - 30_000)
    figures = queue_lag_figures(2, 5, 10, times.get, NOW)
    assert figures == LagFigures(lag=8, lag_seconds=30.0, oldest_unconsumed_ms=NOW - 30_000)


def test_no_lag_is_zero_seconds_without_reading_a_store_time() -> None:
    def unreadable(offset: int) -> int | None:
        raise AssertionError(f"read offset {offset}")

    assert queue_lag_figures(10, 0, 10, unreadable, NOW) == LagFigures(0, 0.0, None)


def test_an_unreadable_store_time_is_unknown_seconds() -> None:
    assert queue_lag_figures(3, 0, 10, lambda _offset: None, NOW) == LagFigures(7, None, None)


def test_ages_are_floored_at_zero() -> None:
    assert age_seconds(NOW + 5_000, NOW) == 0.0
    assert age_seconds(NOW - 1_500, NOW) == 1.5

"""burrow: Burrow's rules over a window of snapshots, rates and the time to drain."""

from __future__ import annotations

import pytest

from spark_jobs.lag.burrow import (
    Rates,
    Status,
    WindowEntry,
    commit_stamps,
    evaluate_window,
    time_to_drain,
    window_rates,
    worst,
)
from tests.spark_jobs.lag.conftest import entries, minute


@pytest.mark.parametrize(
    ("window", "now", "status"),
    [
        # Lag 0 now, or anywhere in the window: OK.
        (entries([1, 2, 3], [5, 5, 0]), minute(2), Status.OK),
        (entries([1, 1, 1], [5, 0, 5]), minute(2), Status.OK),
        # A single snapshot is no evidence.
        (entries([1], [5], [minute(-100)]), minute(0), Status.OK),
        # The committed offset went backwards.
        (entries([10, 12, 11], [5, 5, 9]), minute(2), Status.REWIND),
        # Commits stopped: the last one is older than the span of the window's commits.
        (entries([5, 5, 5], [3, 4, 5], [minute(0)] * 3), minute(2), Status.STOP),
        (entries([1, 2, 3], [9, 9, 9], [minute(0), minute(1), minute(2)]), minute(5), Status.STOP),
        # Commits arrive but the offset does not move.
        (entries([5, 5, 5], [3, 4, 5], [minute(0), minute(1), minute(2)]), minute(2), Status.STALL),
        # Offsets move but the lag never shrinks.
        (entries([1, 3, 5], [10, 10, 12]), minute(2), Status.WARN),
        # Offsets move and the lag shrinks at least once.
        (entries([1, 3, 5], [10, 8, 12]), minute(2), Status.OK),
    ],
)
def test_burrow_rules(window: list[WindowEntry], now: int, status: Status) -> None:
    assert evaluate_window(window, now) is status


def test_without_commit_times_an_unmoved_offset_is_a_stop() -> None:
    window = entries([5, 5, 5], [3, 4, 5])
    assert commit_stamps(window) == [minute(0)] * 3
    assert evaluate_window(window, minute(2)) is Status.STOP
    moving = entries([5, 6, 6], [3, 4, 5])
    assert commit_stamps(moving) == [minute(0), minute(1), minute(1)]


def test_group_status_is_the_worst_queue() -> None:
    assert worst([Status.OK, Status.WARN, Status.STOP]) is Status.STOP
    assert worst([Status.STALL, Status.REWIND, Status.STOP]) is Status.REWIND
    assert worst([]) is Status.NOTFOUND
    assert Status.STOP.is_error and not Status.WARN.is_error


def test_rates_and_time_to_drain() -> None:
    window = entries([100, 220], [200, 150])  # 120 consumed, 70 produced in 60 s
    rates = window_rates(window)
    assert rates.consume == 2.0
    assert rates.produce == pytest.approx(70 / 60)
    assert time_to_drain(150, rates) == pytest.approx(150 / (2.0 - 70 / 60))
    assert time_to_drain(0, Rates(None, None)) == 0.0
    assert time_to_drain(10, Rates(1.0, 1.0)) is None
    assert time_to_drain(10, Rates(None, None)) is None
    assert window_rates(window[:1]) == Rates(None, None)

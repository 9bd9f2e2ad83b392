"""The timer wheel: slots by time, stale slots read as empty, revise applies a unit once, and
only snapshots reach the file."""

from __future__ import annotations

from pathlib import Path

from storage.timer.timer_wheel import TimerWheel


def test_a_slot_holding_another_time_is_empty(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "timerwheel", slots_total=10, precision_ms=1000)
    assert wheel.size == 20 * 32
    wheel.put_slot(5000, 0, 104, 3)
    assert wheel.get_slot(5999) == (5000, 0, 104, 3)
    assert wheel.get_slot(25_000).empty, "same index, one turn later: another time"
    wheel.close()


def test_revise_applies_a_unit_only_when_the_slot_lacks_it(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "timerwheel", slots_total=10, precision_ms=1000)
    assert wheel.revise_slot(3000, 52, 1)
    assert wheel.revise_slot(3000, 104, 1)
    assert not wheel.revise_slot(3000, 52, 1)
    assert wheel.get_slot(3000) == (3000, 52, 104, 2)
    wheel.close()


def test_the_file_holds_what_was_snapshotted_and_written_only(tmp_path: Path) -> None:
    path = tmp_path / "timerwheel"
    wheel = TimerWheel(path, slots_total=1000, precision_ms=100)
    wheel.put_slot(100, 0, 0, 1)
    snapshot = wheel.snapshot()
    wheel.put_slot(200, 52, 52, 1)  # after the snapshot
    wheel.write_snapshot(snapshot)
    assert wheel.snapshot().pages, "the later change is still pending"
    wheel.close()
    reopened = TimerWheel(path, slots_total=1000, precision_ms=100)
    assert reopened.get_slot(100) == (100, 0, 0, 1)
    assert reopened.get_slot(200).empty
    reopened.close()


def test_occupied_lists_the_non_empty_slots_of_a_range_in_time_order(tmp_path: Path) -> None:
    wheel = TimerWheel(tmp_path / "timerwheel", slots_total=10, precision_ms=1000)
    wheel.put_slot(7000, 0, 52, 2)
    wheel.put_slot(3000, 104, 104, 1)
    wheel.put_slot(30_000, 156, 156, 1)  # beyond the range asked for
    assert [s.time_ms for s in wheel.occupied(2000, 8)] == [3000, 7000]
    assert [s.time_ms for s in wheel.occupied(12_000, 30)] == [30_000], "one turn at most"
    assert wheel.occupied(4000, 3) == []
    wheel.close()

"""The timer's files together: placing records in slots, rolling far ones, walking a slot,
flushing in order and recovering after a crash."""

from __future__ import annotations

from pathlib import Path

from storage.timer import MAGIC_DEFAULT, MAGIC_DELETE, MAGIC_ROLL, TimerConfig, TimerStore
from storage.timer.timer_log import UNIT_SIZE

CONFIG = TimerConfig(
    precision_ms=100, slots_total=1000, roll_window_slots=300, log_file_size=UNIT_SIZE * 10 + 20
)
NOW = 1_700_000_000_000


def open_store(root: Path, now: int = NOW) -> TimerStore:
    store = TimerStore(root, CONFIG)
    store.recover(lambda unit: True, now)
    return store


def test_units_of_a_slot_come_back_oldest_first_across_log_files(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for number in range(25):  # 10 units a file: three files
        store.place(NOW + 500 + number % 2 * 100, 1000 + number, 60, number, MAGIC_DEFAULT, NOW)
    even = store.units_of_slot(NOW + 500)
    odd = store.units_of_slot(NOW + 650)
    assert [u.queue_offset for u in even] == list(range(0, 25, 2))
    assert [u.queue_offset for u in odd] == list(range(1, 25, 2))
    assert [u.offset_py for u in odd] == [1000 + n for n in range(1, 25, 2)]
    assert store.units_of_slot(NOW + 700) == []
    assert store.slot(NOW + 500).num == 13
    store.close()


def test_a_record_beyond_the_roll_window_waits_in_an_intermediate_slot(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    window_ms = 300 * 100
    far = NOW + 5 * window_ms
    slot_time = store.place(far, 1, 60, 0, MAGIC_DEFAULT, NOW)
    assert slot_time == NOW + window_ms
    [unit] = store.units_of_slot(slot_time)
    assert unit.magic == MAGIC_DEFAULT | MAGIC_ROLL
    just_beyond = NOW + window_ms + 100  # would roll again soon after: half a window instead
    assert store.place(just_beyond, 2, 60, 1, MAGIC_DEFAULT, NOW) == NOW + window_ms // 2
    near = store.place(NOW + 1000, 3, 60, 2, MAGIC_DELETE, NOW)
    assert near == NOW + 1000
    assert store.units_of_slot(near)[0].magic == MAGIC_DELETE
    store.close()


def test_a_flushed_store_reopens_with_its_slots_read_time_and_queue_offset(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for number in range(7):
        store.place(NOW + 300, 100 + number, 60, number, MAGIC_DEFAULT, NOW)
    store.read_time_ms = NOW + 200
    store.queue_offset = 7
    store.end_flush(store.begin_flush())
    store.close()

    reopened = open_store(tmp_path, NOW + 10_000)
    assert reopened.read_time_ms == NOW + 200
    assert reopened.queue_offset == 7
    assert [u.offset_py for u in reopened.units_of_slot(NOW + 300)] == list(range(100, 107))
    reopened.close()


def test_units_written_after_the_checkpoint_are_put_back_once(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for number in range(3):
        store.place(NOW + 300, number, 60, number, MAGIC_DEFAULT, NOW)
    store.queue_offset = 3
    store.end_flush(store.begin_flush())
    # Written after the checkpoint: in the log's pages, but the wheel on disk never saw them.
    for number in range(3, 8):
        store.place(NOW + 300 + number % 2 * 100, number, 60, number, MAGIC_DEFAULT, NOW)
    store.log.flush()
    store.close()  # like a crash: no end_flush

    reopened = open_store(tmp_path)
    assert [u.queue_offset for u in reopened.units_of_slot(NOW + 300)] == [0, 1, 2, 4, 6]
    assert [u.queue_offset for u in reopened.units_of_slot(NOW + 400)] == [3, 5, 7]
    assert reopened.queue_offset == 8, "enqueueing resumes after the last unit"
    reopened.close()
    again = open_store(tmp_path)  # recovering twice changes nothing
    assert again.slot(NOW + 300).num == 5
    again.close()


def test_recovery_cuts_the_log_at_the_first_unit_that_points_at_nothing(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for number in range(6):
        store.place(NOW + 300, number, 60, number, MAGIC_DEFAULT, NOW)
    store.log.flush()
    store.close()

    reopened = TimerStore(tmp_path, CONFIG)
    findings = reopened.recover(lambda unit: unit.offset_py < 4, NOW)
    assert any("cut" in finding for finding in findings)
    assert [u.offset_py for u in reopened.units_of_slot(NOW + 300)] == [0, 1, 2, 3]
    assert reopened.queue_offset == 4
    reopened.place(NOW + 300, 9, 60, 4, MAGIC_DEFAULT, NOW)  # appends where the cut was
    assert [u.offset_py for u in reopened.units_of_slot(NOW + 300)] == [0, 1, 2, 3, 9]
    reopened.close()


def test_the_read_time_of_a_long_stopped_store_is_kept_within_the_wheel(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.read_time_ms = NOW
    store.end_flush(store.begin_flush())
    store.close()
    much_later = NOW + 10 * CONFIG.wheel_span_ms
    reopened = open_store(tmp_path, much_later)
    assert NOW < reopened.read_time_ms < much_later
    reopened.close()


def test_a_fresh_store_starts_reading_now(tmp_path: Path) -> None:
    store = open_store(tmp_path, NOW + 123)
    assert store.read_time_ms == NOW + 100
    assert store.queue_offset == 0
    store.close()


def test_without_a_checkpoint_reading_starts_at_the_first_unit_not_now(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    store.place(NOW + 300, 1, 60, 0, MAGIC_DEFAULT, NOW)
    store.place(NOW + 900, 2, 60, 1, MAGIC_DEFAULT, NOW)
    store.log.flush()
    store.close()  # killed before the first checkpoint
    reopened = open_store(tmp_path, NOW + 60_000)
    assert reopened.read_time_ms == NOW + 300, "the overdue slots still fire"
    reopened.close()


def test_a_flush_deletes_log_files_whose_units_have_all_fired(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    for number in range(25):  # three files, written at NOW
        store.place(NOW + 500, number, 60, number, MAGIC_DEFAULT, NOW)
    later = NOW + 10_000_000
    store.place(later + 500, 99, 60, 25, MAGIC_DEFAULT, later)
    store.read_time_ms = NOW + CONFIG.roll_window_ms + 100
    store.end_flush(store.begin_flush())
    assert store.log.min_offset == 2 * CONFIG.log_file_size, "the files written at NOW went"
    assert [u.offset_py for u in store.units_of_slot(later + 500)] == [99]
    store.close()
    reopened = open_store(tmp_path, later)
    assert [u.offset_py for u in reopened.units_of_slot(later + 500)] == [99]
    reopened.close()

"""The timer log: 52-byte units, blanks at file ends, scans that stop at garbage, truncation."""

from __future__ import annotations

from pathlib import Path

from storage.timer.timer_log import MAGIC_DEFAULT, MAGIC_ROLL, UNIT_SIZE, TimerLog

FILE_SIZE = UNIT_SIZE * 3 + 30  # three units and a blank


def test_units_round_trip_and_never_straddle_files(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog", FILE_SIZE)
    log.load()
    positions = [
        log.append(-1 if n == 0 else n - 1, MAGIC_DEFAULT, 1000, n, n, 60, n) for n in range(7)
    ]
    assert positions[3] == FILE_SIZE, "the fourth unit starts the second file"
    unit = log.read(positions[4])
    assert unit is not None
    assert (unit.prev_pos, unit.magic, unit.fire_ms, unit.offset_py, unit.queue_offset) == (
        3,
        MAGIC_DEFAULT,
        1004,
        4,
        4,
    )
    assert [u.pos for u in log.scan(0)] == positions
    assert log.read(positions[-1] + UNIT_SIZE) is None
    log.close()


def test_a_scan_stops_at_a_torn_unit_and_truncate_cuts_there(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog", FILE_SIZE)
    log.load()
    for n in range(5):
        log.append(-1, MAGIC_ROLL, 0, 0, n, 60, n)
    mapped = log.queue.files[1]
    mapped.buffer[UNIT_SIZE : UNIT_SIZE + 4] = b"\x00\x00\x00\x07"  # the fifth unit's size
    assert [u.offset_py for u in log.scan(0)] == [0, 1, 2, 3]
    log.truncate(FILE_SIZE + UNIT_SIZE)
    assert log.max_offset == FILE_SIZE + UNIT_SIZE
    log.append(-1, MAGIC_DEFAULT, 0, 0, 9, 60, 9)
    assert [u.offset_py for u in log.scan(0)] == [0, 1, 2, 3, 9]
    log.close()


def test_files_written_before_a_time_are_deleted_but_never_the_last(tmp_path: Path) -> None:
    log = TimerLog(tmp_path / "timerlog", FILE_SIZE)
    log.load()
    for n in range(7):  # three files: units written at 0..2, 3..5, 6
        log.append(-1, MAGIC_DEFAULT, n * 1000, 0, n, 60, n)
    assert log.delete_files_written_before(2000) == 0, "the first file's last unit is at 2000"
    assert log.delete_files_written_before(2001) == 1
    assert log.min_offset == FILE_SIZE
    assert log.delete_files_written_before(10**9) == 1, "never the last file"
    assert [u.offset_py for u in log.scan(log.min_offset)] == [6]
    log.close()

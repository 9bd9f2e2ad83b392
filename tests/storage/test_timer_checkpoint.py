"""The timer checkpoint keeps its values across a reopen; a fresh one says it was never written."""

from __future__ import annotations

from pathlib import Path

from storage.timer.checkpoint import TimerCheckpoint


def test_values_survive_a_reopen_and_the_version_counts_writes(tmp_path: Path) -> None:
    path = tmp_path / "config" / "timercheck"
    checkpoint = TimerCheckpoint(path)
    assert not checkpoint.written
    checkpoint.last_read_time_ms = 1_700_000_000_000
    checkpoint.last_timer_log_flush_pos = 520
    checkpoint.last_timer_queue_offset = 10
    checkpoint.precision_ms = 100
    checkpoint.flush()
    checkpoint.flush()
    checkpoint.close()
    reopened = TimerCheckpoint(path)
    assert reopened.written
    assert (
        reopened.last_read_time_ms,
        reopened.last_timer_log_flush_pos,
        reopened.last_timer_queue_offset,
        reopened.precision_ms,
        reopened.state_version,
    ) == (1_700_000_000_000, 520, 10, 100, 2)
    assert path.stat().st_size == 4096
    reopened.close()

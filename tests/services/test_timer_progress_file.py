"""The master's timer progress as a slave keeps it: written from a master's JSON, read back;
anything that is not one is ignored."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.timer.progress_file import (
    TIMER_PROGRESS_FILE,
    MasterTimerProgress,
    load_progress,
    parse_progress,
    save_progress,
)


def test_a_masters_progress_is_saved_and_read_back(tmp_path: Path) -> None:
    assert load_progress(tmp_path) is None
    progress = MasterTimerProgress(1_700_000_000_000, 4096)
    assert save_progress(tmp_path, progress.to_json())
    assert (tmp_path / TIMER_PROGRESS_FILE).exists()
    assert load_progress(tmp_path) == progress


@pytest.mark.parametrize(
    "content",
    [None, [], {"read_time_ms": 1}, {"read_time_ms": "1", "commit_offset": 2}],
    ids=["null", "list", "no-offset", "text"],
)
def test_anything_else_is_ignored(tmp_path: Path, content: object) -> None:
    assert parse_progress(content) is None
    assert not save_progress(tmp_path, content)
    assert load_progress(tmp_path) is None

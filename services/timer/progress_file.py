"""``config/timerProgress.json``: how far the master's wheel had fired, as a slave last copied
it (RocketMQ's slave copies the master's ``timercheck`` the same way).

``{"read_time_ms": R, "commit_offset": C}``: every timer record due before ``R`` was delivered
(or rolled) by the master, and its copies lie below CommitLog offset ``C``. A promoted slave
whose log reaches ``C`` takes those records as done without looking each one up; one whose
log does not (asynchronous replication behind) looks them all up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, NamedTuple

from storage.json_file import load_json, save_json

TIMER_PROGRESS_FILE: Final = "timerProgress.json"


class MasterTimerProgress(NamedTuple):
    read_time_ms: int
    commit_offset: int

    def to_json(self) -> dict[str, int]:
        return {"read_time_ms": self.read_time_ms, "commit_offset": self.commit_offset}


def parse_progress(content: object) -> MasterTimerProgress | None:
    """The progress in ``content`` (a file's or a master's JSON), or None when it is none."""
    if not isinstance(content, dict):
        return None
    read_time, offset = content.get("read_time_ms"), content.get("commit_offset")
    if not isinstance(read_time, int) or not isinstance(offset, int):
        return None
    return MasterTimerProgress(read_time, offset)


def save_progress(config_dir: Path, content: object) -> bool:
    """Write a master's progress (a slave's config sync); False when ``content`` is none."""
    progress = parse_progress(content)
    if progress is None:
        return False
    save_json(config_dir / TIMER_PROGRESS_FILE, progress.to_json())
    return True


def load_progress(config_dir: Path) -> MasterTimerProgress | None:
    return parse_progress(load_json(config_dir / TIMER_PROGRESS_FILE))

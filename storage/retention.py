"""Retention and disk space: expire old files, refuse writes on a full disk.

RocketMQ's rules (reference §1, §4.2):

- CommitLog files older than ``file_reserved_time`` (72 h) are deleted at the hours of
  ``delete_when`` ("04"), or whenever disk use passes ``disk_max_used_space_ratio`` (75 %);
  above ``disk_space_clean_forcibly_ratio`` (85 %) files go even when not expired.
- Never the last file; at most 10 files per pass; stop at the first file that stays.
- Then ConsumeQueue files whose last unit points below the new CommitLog min offset go too,
  and every queue's min offset is corrected.
- At ``disk_space_warning_level_ratio`` (90 %), or after ENOSPC, the store refuses writes
  ("not writeable: disk full") and keeps serving reads; once space is back it accepts
  writes again.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage.running_flags import DISK_FULL_REASON, RunningFlags


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """When files expire and how full the disk may get."""

    file_reserved_time_hours: float = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True


DiskUsage = Callable[[Path], tuple[int, int, int]]
"""(total, used, free) bytes of the filesystem holding a path, as ``shutil.disk_usage``."""

ExpireFiles = Callable[[int, bool, int], int]
"""Delete CommitLog files older than (ms) — or all but the last when forced (bool) — at a
time (ms); returns how many went (``MappedFileQueue.delete_expired_by_time``)."""


def disk_use_ratio(usage: tuple[int, int, int]) -> float:
    total, used, _ = usage
    return used / total if total else 0.0


def is_time_to_delete(delete_when: str, hour: int) -> bool:
    """Whether ``hour`` is one of the ``;``-separated hours of ``delete_when``."""
    return any(part.strip().isdigit() and int(part) == hour for part in delete_when.split(";"))


class StoreCleaner:
    """One pass of retention and disk checks (called by the clean service).

    It gets what it acts on, not the store: the directory to measure, the running flags to
    set, the CommitLog's file expiry and what to do once CommitLog files are gone.
    """

    def __init__(
        self,
        config: RetentionConfig,
        store_dir: Path,
        flags: RunningFlags,
        expire_commit_log_files: ExpireFiles,
        after_commit_log_deleted: Callable[[], None],
        disk_usage: DiskUsage = shutil.disk_usage,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.store_dir = store_dir
        self.flags = flags
        self.expire_commit_log_files = expire_commit_log_files
        self.after_commit_log_deleted = after_commit_log_deleted
        self.disk_usage = disk_usage
        self.clock = clock

    def run_once(self) -> int:
        """Check the disk, delete what has expired; the number of CommitLog files deleted."""
        ratio = disk_use_ratio(self.disk_usage(self.store_dir))
        self._update_writeable(ratio)
        deleted = self._delete_expired_commit_log(ratio)
        if deleted:
            self.after_commit_log_deleted()
        return deleted

    def _update_writeable(self, ratio: float) -> None:
        flags = self.flags
        warning = self.config.disk_space_warning_level_ratio / 100
        if ratio >= warning:
            if flags.writeable:
                flags.mark_not_writeable(
                    f"{DISK_FULL_REASON} ({ratio:.0%} used, limit {warning:.0%})"
                )
        elif flags.disk_full:
            flags.mark_writeable()

    def _delete_expired_commit_log(self, ratio: float) -> int:
        config = self.config
        now_ms = int(self.clock() * 1000)
        hour = time.localtime(now_ms / 1000).tm_hour
        time_up = is_time_to_delete(config.delete_when, hour)
        space_full = ratio >= config.disk_max_used_space_ratio / 100
        forcibly = ratio >= config.disk_space_clean_forcibly_ratio / 100
        if not (time_up or space_full or forcibly):
            return 0
        clean_now = config.clean_file_forcibly_enable and forcibly
        expired_ms = int(config.file_reserved_time_hours * 3600 * 1000)
        return self.expire_commit_log_files(expired_ms, clean_now, now_ms)

"""Retention and disk space: expire old files, refuse writes on a full disk.

RocketMQ's rules (reference §1, §4.2):

- CommitLog files older than ``file_reserved_time`` (72 h) are deleted at the hours of
  ``delete_when`` ("04"), or whenever disk use passes ``disk_max_used_space_ratio`` (75 %);
  above ``disk_space_clean_forcibly_ratio`` (85 %) files go even when not expired.
- Never the last file; at most 10 files per pass; stop at the first file that stays.
- Then ConsumeQueue files whose last unit points below the new CommitLog min offset go too,
  and every queue's min offset is corrected.
- At ``disk_space_warning_level_ratio`` (90 %), or after ENOSPC, the store refuses writes
  ("disk full") and keeps serving reads; once space is back it accepts writes again. The
  :class:`~storage.disk_watch.DiskWatch` measures and sets that refusal (a pass here asks it
  first); its thread also runs a pass early when the disk is over the clean-forcibly ratio.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from storage.disk_watch import DiskWatch


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """When files expire and how full the disk may get."""

    file_reserved_time_hours: float = 72
    delete_when: str = "04"
    disk_max_used_space_ratio: int = 75
    disk_space_clean_forcibly_ratio: int = 85
    disk_space_warning_level_ratio: int = 90
    clean_file_forcibly_enable: bool = True
    disk_check_interval_ms: int = 200


ExpireFiles = Callable[[int, bool, int], int]
"""Delete CommitLog files older than (ms) — or all but the last when forced (bool) — at a
time (ms); returns how many went (``MappedFileQueue.delete_expired_by_time``)."""


def is_time_to_delete(delete_when: str, hour: int) -> bool:
    """Whether ``hour`` is one of the ``;``-separated hours of ``delete_when``."""
    return any(part.strip().isdigit() and int(part) == hour for part in delete_when.split(";"))


class StoreCleaner:
    """One pass of retention and disk checks (called by the clean service).

    It gets what it acts on, not the store: the disk watch (which measures and sets the
    disk-full refusal), the CommitLog's file expiry and what to do once CommitLog files are
    gone. The clean thread and the disk watch thread may both run a pass: one at a time.
    """

    def __init__(
        self,
        config: RetentionConfig,
        watch: DiskWatch,
        expire_commit_log_files: ExpireFiles,
        after_commit_log_deleted: Callable[[], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.watch = watch
        self.expire_commit_log_files = expire_commit_log_files
        self.after_commit_log_deleted = after_commit_log_deleted
        self.clock = clock
        self._lock = threading.Lock()

    def run_once(self) -> int:
        """Check the disk, delete what has expired; the number of CommitLog files deleted."""
        with self._lock:
            ratio = self.watch.check()
            deleted = self._delete_expired_commit_log(ratio)
            if deleted:
                self.after_commit_log_deleted()
                self.watch.check()  # space freed: writes may resume now
            return deleted

    def forcibly(self, ratio: float) -> bool:
        """Whether ``ratio`` is over the clean-forcibly ratio, with forced cleaning on."""
        config = self.config
        return (
            config.clean_file_forcibly_enable
            and ratio >= config.disk_space_clean_forcibly_ratio / 100
        )

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

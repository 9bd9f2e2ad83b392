"""DiskWatch: how full the store's file systems are, and the disk-full refusal it drives.

RocketMQ checks the CommitLog's and the ConsumeQueues' disks apart (they may be different
devices) and refuses puts while any of them is over ``diskSpaceWarningLevelRatio`` (90 %).
Here every directory the store writes into — CommitLog, ConsumeQueues, index — is sampled
(``statvfs``; one sample per file system) a few times a second by the disk watch thread, so
a refusal starts before the next write could fill the disk, and ends by itself once the
ratio is below the limit again (space freed, retention, or a grown file system). A write
that still meets ENOSPC refuses writes the same way until the next sample finds room.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from storage.running_flags import DISK_FULL_REASON, Refusal, RunningFlags

DiskUsage = Callable[[Path], tuple[int, int, int]]
"""(total, used, free) bytes of the file system holding a path, as ``shutil.disk_usage``."""


@dataclass(frozen=True, slots=True)
class DiskSample:
    """One file system of the store at one moment."""

    path: Path  # the first store directory found on it
    total: int
    free: int
    ratio: float  # used / total, 0.0 for a file system that reports no size


class DiskWatch:
    """Samples the store's file systems and sets or clears the disk-full refusal."""

    def __init__(
        self,
        paths: Sequence[Path],
        flags: RunningFlags,
        warning_ratio_percent: int,
        disk_usage: DiskUsage = shutil.disk_usage,
    ) -> None:
        self.paths = tuple(paths)
        self.flags = flags
        self.warning_ratio = warning_ratio_percent / 100
        self.disk_usage = disk_usage
        self.samples: tuple[DiskSample, ...] = ()

    @property
    def ratio(self) -> float:
        """The fullest file system's use ratio at the last sample (0.0 before any)."""
        return max((sample.ratio for sample in self.samples), default=0.0)

    def sample(self) -> tuple[DiskSample, ...]:
        """Measure every file system once (blocking: a thread's work)."""
        samples: list[DiskSample] = []
        seen: set[int] = set()
        for path in self.paths:
            where = _existing(path)
            try:
                device = where.stat().st_dev
            except OSError:
                continue
            if device in seen:
                continue
            seen.add(device)
            total, used, free = self.disk_usage(where)
            samples.append(DiskSample(path, total, free, used / total if total else 0.0))
        self.samples = tuple(samples)
        return self.samples

    def check(self) -> float:
        """Sample, then refuse writes above the warning ratio or accept them below it; the
        fullest file system's ratio."""
        samples = self.sample()
        fullest = max(samples, key=lambda sample: sample.ratio, default=None)
        if fullest is not None and fullest.ratio >= self.warning_ratio:
            self.flags.refuse(
                Refusal.DISK_FULL,
                f"{DISK_FULL_REASON}: {fullest.path} is {fullest.ratio:.0%} used, "
                f"limit {self.warning_ratio:.0%}",
            )
        else:
            self.flags.clear(Refusal.DISK_FULL)
        return 0.0 if fullest is None else fullest.ratio


def _existing(path: Path) -> Path:
    """``path``, or its nearest existing parent (a directory made on first use)."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path

"""disk_watch: one sample per file system of the store, a disk-full refusal set over the
warning ratio and cleared below it, and no other refusal touched."""

from __future__ import annotations

from pathlib import Path

from storage.disk_watch import DiskWatch
from storage.running_flags import Refusal, RunningFlags
from tests.disk_support import tmpfs


def usage(ratio: float) -> tuple[int, int, int]:
    total = 1_000_000
    used = int(total * ratio)
    return total, used, total - used


def test_one_sample_per_file_system_and_missing_directories_count_as_their_parent(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "other-disk", "1m") as other:
        watch = DiskWatch(
            [tmp_path / "commitlog", tmp_path / "consumequeue", other / "index"],
            RunningFlags(),
            90,
        )
        samples = watch.sample()
        assert [sample.path for sample in samples] == [tmp_path / "commitlog", other / "index"]
        assert samples[1].total == 1024 * 1024 and samples[1].ratio == 0.0


def test_over_the_warning_ratio_writes_are_refused_and_resume_below_it(tmp_path: Path) -> None:
    flags = RunningFlags()
    ratio = [0.5]
    watch = DiskWatch([tmp_path], flags, 90, disk_usage=lambda _: usage(ratio[0]))
    assert watch.check() == 0.5 and flags.writeable
    ratio[0] = 0.93
    assert watch.check() == 0.93
    assert flags.disk_full and f"{tmp_path} is 93% used, limit 90%" in flags.not_writeable_reason
    flags.refuse(Refusal.FLUSH_FAILED, "fsync failed")
    ratio[0] = 0.2
    watch.check()
    assert not flags.disk_full and not flags.writeable  # space is back; the fsync is not
    assert flags.not_writeable_reason == "fsync failed"
    assert watch.ratio == 0.2

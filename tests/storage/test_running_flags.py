"""running_flags: writeable or not, and why; a full disk is told apart."""

from __future__ import annotations

from storage.running_flags import DISK_FULL_REASON, RunningFlags


def test_not_writeable_keeps_its_reason_until_writeable_again() -> None:
    flags = RunningFlags()
    assert flags.writeable and flags.not_writeable_reason == "" and not flags.disk_full
    flags.mark_not_writeable("file error: EIO")
    assert (flags.writeable, flags.not_writeable_reason, flags.disk_full) == (
        False,
        "file error: EIO",
        False,
    )
    flags.mark_not_writeable(f"{DISK_FULL_REASON}: 96% used")
    assert flags.disk_full
    flags.mark_writeable()
    assert flags.writeable and flags.not_writeable_reason == "" and not flags.disk_full

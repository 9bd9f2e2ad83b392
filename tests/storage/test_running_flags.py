"""running_flags: writeable or not, and why; a full disk is told apart."""

from __future__ import annotations

from storage.running_flags import DISK_FULL_REASON, Refusal, RunningFlags


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


def test_each_cause_is_cleared_on_its_own_and_the_most_lasting_comes_first() -> None:
    flags = RunningFlags()
    flags.refuse(Refusal.DISK_FULL, "disk full: 95% used")
    flags.refuse(Refusal.DISPATCH, "dispatch stopped")
    assert [flags.first_refusal] == [Refusal.DISPATCH]
    assert flags.not_writeable_reason == "dispatch stopped; disk full: 95% used"
    flags.clear(Refusal.DISK_FULL)
    assert not flags.writeable and flags.not_writeable_reason == "dispatch stopped"
    flags.refuse(Refusal.FLUSH_FAILED, "fsync failed")
    flags.mark_writeable()  # clears everything a restart is not needed for
    assert flags.flush_failed and not flags.writeable
    assert flags.first_refusal is Refusal.FLUSH_FAILED
    flags.clear(Refusal.DISPATCH)  # already gone: nothing changes
    assert flags.not_writeable_reason == "fsync failed"

"""File expiry and disk-full handling on real files (disk usage injected where needed)."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

import storage.mapped_file
from storage import (
    GetMessageStatus,
    Message,
    MessageStore,
    StoreConfig,
    StoreNotWriteableError,
)
from storage.disk_watch import DiskWatch
from storage.retention import RetentionConfig, StoreCleaner, is_time_to_delete
from storage.running_flags import RunningFlags


def hour_now() -> int:
    """The hour now, read in the test itself: a module constant goes stale when a long run
    crosses the hour between collecting and running."""
    return time.localtime().tm_hour


def config(delete_when: str = "99") -> StoreConfig:
    return StoreConfig(
        commit_log_file_size=4096,
        consume_queue_units_per_file=10,
        retention=RetentionConfig(file_reserved_time_hours=1, delete_when=delete_when),
    )


def commit_log_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def fill(store: MessageStore, count: int) -> None:
    for i in range(count):
        store.put([Message("T", bytes([i % 200]) * 1000)])


def age(paths: list[Path], hours: float) -> None:
    stamp = time.time() - hours * 3600
    for path in paths:
        os.utime(path, (stamp, stamp))


def usage(ratio: float) -> tuple[int, int, int]:
    total = 1_000_000
    used = int(total * ratio)
    return total, used, total - used


def test_is_time_to_delete_reads_a_list_of_hours() -> None:
    assert is_time_to_delete("04", 4)
    assert is_time_to_delete("03;04;22", 22)
    assert not is_time_to_delete("04", 5)


def test_the_cleaner_acts_through_what_it_is_given(tmp_path: Path) -> None:
    # No store: the flags, the file expiry and the after-deletion step are all it uses.
    expiries: list[tuple[int, bool]] = []
    after: list[str] = []
    flags = RunningFlags()
    ratio = [0.95]

    def expire(expired_ms: int, forcibly: bool, now_ms: int) -> int:
        expiries.append((expired_ms, forcibly))
        return 3

    cleaner = StoreCleaner(
        RetentionConfig(file_reserved_time_hours=2, delete_when="99"),
        DiskWatch([tmp_path], flags, 90, disk_usage=lambda _: usage(ratio[0])),
        expire,
        lambda: after.append("deleted"),
    )
    assert cleaner.run_once() == 3
    assert not flags.writeable and flags.disk_full
    assert expiries == [(2 * 3600 * 1000, True)]  # above 85 %: forcibly
    assert after == ["deleted"]
    ratio[0] = 0.10  # space is back, not the hour to delete: nothing expires
    assert cleaner.run_once() == 0
    assert flags.writeable
    assert expiries == [(2 * 3600 * 1000, True)] and after == ["deleted"]


def test_expired_files_go_ten_per_pass_at_the_delete_hour_never_the_last(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config(f"{hour_now():02d}")) as store:
        store.disk_watch.disk_usage = lambda _: usage(0.10)
        fill(store, 100)
        files = commit_log_files(tmp_path)
        assert len(files) > 20
        age(files, hours=2)
        assert store.clean_once() == 10
        assert store.clean_once() == 10
        while store.clean_once():
            pass
        remaining = commit_log_files(tmp_path)
        assert remaining == files[-1:], "the last file is never deleted"
        assert store.commit_log.min_offset == int(files[-1].name)


def test_files_are_kept_outside_the_delete_hour_and_while_young(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config(f"{(hour_now() + 1) % 24:02d}")) as store:
        store.disk_watch.disk_usage = lambda _: usage(0.10)
        fill(store, 40)
        age(commit_log_files(tmp_path), hours=2)
        assert store.clean_once() == 0
    with MessageStore.open(tmp_path, config(f"{hour_now():02d}")) as store:
        store.disk_watch.disk_usage = lambda _: usage(0.10)
        files = commit_log_files(tmp_path)
        age(files[3:], hours=0)  # file 3 is young: deletion stops there
        assert store.clean_once() == 3


def test_deletion_removes_consume_queue_files_and_moves_the_min_offset(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config(f"{hour_now():02d}")) as store:
        store.disk_watch.disk_usage = lambda _: usage(0.10)
        fill(store, 60)
        cq_dir = tmp_path / "consumequeue" / "T" / "0"
        cq_files_before = len(list(cq_dir.iterdir()))
        age(commit_log_files(tmp_path), hours=2)
        while store.clean_once():
            pass
        min_offset = store.min_offset_in_queue("T", 0)
        assert min_offset > 0
        assert len(list(cq_dir.iterdir())) < cq_files_before
        result = store.get_message("g", "T", 0, 0)
        assert result.status is GetMessageStatus.OFFSET_TOO_SMALL
        assert result.next_begin_offset == min_offset
        found = store.get_message("g", "T", 0, min_offset)
        assert found.status is GetMessageStatus.FOUND
        assert found.messages[0].queue_offset == min_offset
        assert store.check() == []
    with MessageStore.open(tmp_path, config()) as store:
        assert store.min_offset_in_queue("T", 0) == min_offset
        assert store.check() == []


def test_disk_over_the_forced_ratio_deletes_files_that_have_not_expired(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config()) as store:
        store.disk_watch.disk_usage = lambda _: usage(0.86)
        fill(store, 40)
        before = len(commit_log_files(tmp_path))
        assert store.clean_once() == 10
        assert len(commit_log_files(tmp_path)) == before - 10


def test_disk_over_the_warning_ratio_refuses_writes_and_keeps_reads(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, config()) as store:
        fill(store, 5)
        store.disk_watch.disk_usage = lambda _: usage(0.95)
        store.clean_once()
        with pytest.raises(StoreNotWriteableError, match="disk full"):
            store.put([Message("T", b"refused")])
        # Over 85 % the forced clean also removed old files; what is left stays readable.
        min_offset = store.min_offset_in_queue("T", 0)
        read = store.get_message("g", "T", 0, min_offset)
        assert read.status is GetMessageStatus.FOUND
        assert len(read.messages) == 5 - min_offset
        store.disk_watch.disk_usage = lambda _: usage(0.50)
        store.clean_once()
        assert store.put([Message("T", b"accepted")])[0].queue_offset == 5


def test_enospc_on_a_new_file_refuses_writes_loses_nothing_and_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_reserve = storage.mapped_file._reserve

    def no_space(fd: int, size: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with MessageStore.open(tmp_path, config()) as store:
        store.disk_watch.disk_usage = lambda _: usage(0.50)
        acknowledged = [store.put([Message("T", b"a" * 1000)])[0] for _ in range(3)]
        monkeypatch.setattr(storage.mapped_file, "_reserve", no_space)
        with pytest.raises(StoreNotWriteableError, match="disk full"):
            for _ in range(10):
                acknowledged.append(store.put([Message("T", b"b" * 1000)])[0])
        with pytest.raises(StoreNotWriteableError, match="disk full"):
            store.put([Message("T", b"c")])
        for result in acknowledged:
            assert store.look_message_by_id(result.msg_id) is not None
        monkeypatch.setattr(storage.mapped_file, "_reserve", real_reserve)
        store.clean_once()
        later = store.put([Message("T", b"space is back")])[0]
        assert later.queue_offset == len(acknowledged)
    with MessageStore.open(tmp_path, config()) as store:
        assert store.max_offset_in_queue("T", 0) == len(acknowledged) + 1
        assert store.check() == []


def test_enospc_while_indexing_is_repaired_once_space_is_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_reserve = storage.mapped_file._reserve_range
    with MessageStore.open(tmp_path, config()) as store:
        store.disk_watch.disk_usage = lambda _: usage(0.50)
        store.put([Message("T", b"first")])

        def no_space(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        # ConsumeQueue files are sparse: their blocks are reserved by the first write.
        monkeypatch.setattr(storage.mapped_file, "_reserve_range", no_space)
        stored = store.put([Message("Other", b"needs a new queue file")])[0]
        assert not store.writeable
        with pytest.raises(StoreNotWriteableError, match="disk full"):
            store.put([Message("T", b"refused")])
        monkeypatch.setattr(storage.mapped_file, "_reserve_range", real_reserve)
        store.clean_once()
        store.put([Message("T", b"second")])
        found = store.get_message("g", "Other", 0, 0)
        assert [m.physical_offset for m in found.messages] == [stored.physical_offset]
        assert store.check() == []

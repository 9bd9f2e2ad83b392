"""Flushers and group commit, on real files; fdatasync is counted (and slowed) where needed."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage import FlushDiskType, GetMessageStatus, Message, MessageStore, StoreConfig
from storage.flush_service import DiskWatchService, GroupCommitService, ServiceThread
from tests.storage.conftest import FlushWaiter


class SyncCounter:
    """Wraps os.fdatasync: counts calls, can add latency, and can hold every flush until
    ``gate`` is set."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay
        self.gate = threading.Event()
        self.gate.set()
        self._real: Callable[[int], None] = os.fdatasync
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
        self.gate.wait()
        if self.delay:
            time.sleep(self.delay)
        self._real(fd)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[SyncCounter]:
    counter = SyncCounter()
    monkeypatch.setattr(os, "fdatasync", counter)
    yield counter


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def sync_store(path: Path) -> MessageStore:
    config = StoreConfig(
        commit_log_file_size=64 * 1024,
        consume_queue_units_per_file=100,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
    )
    store = MessageStore.open(path, config)
    store.start_services()
    return store


def test_async_flusher_forces_the_commit_log_in_the_background(
    tmp_path: Path, syncs: SyncCounter
) -> None:
    config = StoreConfig(
        commit_log_file_size=1024 * 1024,
        flush_interval_commit_log_ms=20,
        flush_commit_log_thorough_interval_ms=100,
    )
    with MessageStore.open(tmp_path, config) as store:
        store.start_services()
        result = store.put([Message("T", b"x" * 100)])[0]
        assert wait_until(lambda: store.commit_log.flushed_where >= result.end_offset)
        assert syncs.calls >= 1


def test_async_flusher_waits_for_four_dirty_pages_between_thorough_flushes(
    tmp_path: Path, syncs: SyncCounter
) -> None:
    config = StoreConfig(
        commit_log_file_size=1024 * 1024,
        flush_interval_commit_log_ms=10,
        flush_commit_log_thorough_interval_ms=60_000,
    )
    with MessageStore.open(tmp_path, config) as store:
        store.start_services()
        store.put([Message("T", b"x" * 100)])
        time.sleep(0.2)
        assert store.commit_log.flushed_where == 0, "one page is below the 4-page threshold"
        store.put([Message("T", b"y" * 5 * 4096)])
        assert wait_until(lambda: store.commit_log.flushed_where > 0)


def test_group_commit_shares_one_flush_among_many_waiting_puts(
    tmp_path: Path, syncs: SyncCounter
) -> None:
    syncs.delay = 0.05
    store = sync_store(tmp_path)
    try:
        flushed: list[int] = []
        store.flush_listeners.append(flushed.append)
        waiter = FlushWaiter(store)
        results = []
        for i in range(200):
            results.append(store.put([Message("T", b"m" * 200, queue_id=i % 4)])[0])
            store.wake_flush()  # every put asks, as the services layer does
        assert waiter.wait(results[-1].end_offset)
        assert syncs.calls <= 10, f"{syncs.calls} flushes for 200 puts"
        assert len(flushed) <= 10
        assert flushed == sorted(flushed)
        assert store.flushed_offset == store.commit_log.max_offset
    finally:
        store.close()


def test_group_commit_flushes_everything_written_across_file_rolls() -> None:
    # No store: one flush(0) call reaches the end of one file, as the CommitLog's does.
    files = [4096, 8192, 10_000]
    flushed = [0]

    def flush(least_pages: int) -> None:
        assert least_pages == 0
        flushed[0] = next(end for end in files if end > flushed[0])

    service = GroupCommitService(flush, lambda: flushed[0], lambda: files[-1])
    service.run_once()
    assert flushed[0] == 10_000
    service.run_once()  # nothing new was written: no flush at all
    assert flushed[0] == 10_000


def test_sync_flush_makes_a_message_visible_only_after_its_flush(
    tmp_path: Path, syncs: SyncCounter
) -> None:
    store = sync_store(tmp_path)
    try:
        waiter = FlushWaiter(store)
        result = store.put([Message("T", b"durable")])[0]
        before = store.get_message("g", "T", 0, 0)
        assert before.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert waiter.wait(result.end_offset)
        assert store.dispatch_pending(store.flushed_offset) == 1
        after = store.get_message("g", "T", 0, 0)
        assert after.status is GetMessageStatus.FOUND
        assert after.messages[0].body == b"durable"
    finally:
        store.close()


def test_a_message_whose_flush_is_held_stays_stored_and_invisible_until_flushed(
    tmp_path: Path, syncs: SyncCounter
) -> None:
    syncs.gate.clear()  # the disk does not answer
    store = sync_store(tmp_path)
    try:
        waiter = FlushWaiter(store)
        result = store.put([Message("T", b"slow disk")])[0]
        store.wake_flush()
        assert wait_until(lambda: syncs.calls >= 1)  # the group commit is in its flush
        assert store.flushed_offset < result.end_offset
        assert store.dispatch_pending(store.flushed_offset) == 0
        assert store.get_message("g", "T", 0, 0).messages == []
        syncs.gate.set()
        assert waiter.wait(result.end_offset)
        assert store.dispatch_pending(store.flushed_offset) == 1
        assert store.get_message("g", "T", 0, 0).messages[0].body == b"slow disk"
    finally:
        syncs.gate.set()
        store.close()


def test_a_pass_that_raises_is_kept_and_the_thread_goes_on() -> None:
    passes: list[int] = []
    done = threading.Event()

    class Flaky(ServiceThread):
        name = "flaky"

        def run_once(self) -> None:
            passes.append(len(passes))
            if len(passes) == 1:
                raise RuntimeError("first pass fails")
            done.set()

    service = Flaky(0.001)
    service.start()
    try:
        assert done.wait(30)
    finally:
        service.stop()
    assert len(passes) >= 2 and service.failure is None


def test_the_disk_watch_cleans_at_once_over_the_clean_forcibly_ratio() -> None:
    ratios = iter([0.5, 0.9, 0.9, 0.9])
    cleans: list[float] = []
    watch = DiskWatchService(
        lambda: next(ratios), lambda ratio: ratio >= 0.85, lambda: cleans.append(1.0), 0.2, 3600
    )
    for _ in range(4):
        watch.run_once()
    assert cleans == [1.0]  # once over the ratio, then not again within the clean interval

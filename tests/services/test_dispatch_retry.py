"""dispatch_retry: a dispatch stalled by a full disk goes on from where it stopped once space
is back, without a put, and wakes what waits for the records; a retry that raises is not
retried in a loop of errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.dispatch_retry import DispatchRetry
from storage import Message, MessageStore, StoreConfig, StoreDiskFullError
from storage.record.properties import PROPERTY_KEYS
from storage.retention import RetentionConfig
from tests.disk_support import fill_until_free, tmpfs
from tests.services.conftest import until

CONFIG = StoreConfig(
    commit_log_file_size=1024 * 1024,
    consume_queue_units_per_file=1000,
    max_hash_slot_num=64,
    max_index_num=256,
    retention=RetentionConfig(disk_space_warning_level_ratio=100),
)


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "4m") as mount_point:
        yield mount_point


async def test_a_stalled_dispatch_resumes_by_itself_once_space_is_back(disk: Path) -> None:
    store = MessageStore.open(disk / "store", CONFIG)
    arrivals: list[int] = []
    store.arrival_listeners.append(
        lambda topic, queue, max_offset, code: arrivals.append(max_offset)
    )
    retry = DispatchRetry(store, interval=0.01)
    retry.start()
    try:
        store.put([Message("T", b"m", properties={PROPERTY_KEYS: "k0"})])
        ballast = fill_until_free(disk / "ballast", 0)
        stored = 1
        with pytest.raises(StoreDiskFullError):
            for i in range(1, 10_000):
                store.put([Message("T", b"m", properties={PROPERTY_KEYS: f"k{i}"})])
                stored += 1
        assert store.dispatch_stalled
        assert not retry.retry_once() and retry.stalled_since is not None
        arrivals.clear()
        ballast.unlink()
        await until(lambda: not store.dispatch_stalled)
        assert store.writeable and retry.stalled_since is None
        assert arrivals == [stored], "the record dispatched late wakes its waiters"
        assert [m.body for m in store.query_message("T", f"k{stored - 1}")] == [b"m"]
    finally:
        await retry.stop()
        store.close()


async def test_a_retry_that_raises_is_logged_and_answered_false(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        store.dispatcher.needs_reput = True

        def broken() -> bool:
            raise RuntimeError("a bug")

        monkeypatch.setattr(store, "retry_dispatch", broken)
        retry = DispatchRetry(store)
        assert not retry.retry_once() and not retry.retry_once()
        assert [r.getMessage() for r in caplog.records] == ["retrying dispatch failed"]
        store.dispatcher.needs_reput = False

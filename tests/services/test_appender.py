"""The durable put path: append, then (SYNC_FLUSH) wait for the group commit; a flush slower
than the timeout answers FLUSH_DISK_TIMEOUT and the message becomes visible once flushed."""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from services.appender import Appender
from services.durability import DurabilityTracker
from storage import (
    FlushDiskType,
    GetMessageStatus,
    Message,
    MessageStore,
    PutStatus,
    StoreFlushFailedError,
)
from tests.services.conftest import SMALL, until

SYNC = dataclasses.replace(SMALL, flush_disk_type=FlushDiskType.SYNC_FLUSH)


def visible(store: MessageStore, topic: str) -> list[bytes]:
    return [m.body for m in store.get_message("g", topic, 0, 0, 100).messages]


@pytest.fixture
def async_store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore.open(tmp_path / "async", SMALL) as store:
        yield store


@pytest.fixture
async def sync_store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    """A SYNC_FLUSH store with its group commit running."""
    store = MessageStore.open(tmp_path / "sync", SYNC)
    store.start_services()
    yield store
    store.stop_services()
    store.close()


async def test_async_flush_acknowledges_at_once_and_keeps_batches_whole(
    async_store: MessageStore,
) -> None:
    tracker = DurabilityTracker(async_store)
    tracker.start()
    appender = Appender(async_store, tracker)
    [one] = await appender.put([Message("A", b"one")])
    batch = await appender.put([Message("A", b"two"), Message("A", b"three")])
    assert one.status is PutStatus.PUT_OK and one.queue_offset == 0
    assert [(r.status, r.queue_offset) for r in batch] == [
        (PutStatus.PUT_OK, 1),
        (PutStatus.PUT_OK, 2),
    ]
    assert batch[1].physical_offset == batch[0].end_offset, "a batch is appended in one piece"
    assert visible(async_store, "A") == [b"one", b"two", b"three"]
    tracker.stop()


async def test_sync_flush_acknowledges_once_on_disk_and_only_then_dispatches(
    sync_store: MessageStore,
) -> None:
    tracker = DurabilityTracker(sync_store)
    tracker.start()
    appender = Appender(sync_store, tracker)
    results = await appender.put([Message("S", b"a"), Message("S", b"b")])
    assert {r.status for r in results} == {PutStatus.PUT_OK}
    assert sync_store.flushed_offset >= results[-1].end_offset
    assert visible(sync_store, "S") == [b"a", b"b"]
    tracker.stop()


async def test_a_slow_flush_answers_flush_disk_timeout_and_dispatches_later(
    tmp_path: Path,
) -> None:
    # No group commit runs, so nothing flushes until the test does.
    with MessageStore.open(tmp_path / "slow", SYNC) as store:
        tracker = DurabilityTracker(store, timeout=0.0)
        tracker.start()
        appender = Appender(store, tracker)
        [result] = await appender.put([Message("Slow", b"late")])
        assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert store.flushed_offset < result.end_offset
        assert store.get_message("g", "Slow", 0, 0).status is not GetMessageStatus.FOUND
        store.flush_commit_log(0)  # the flush that finally happens
        await until(lambda: visible(store, "Slow") == [b"late"])
        tracker.stop()


async def test_a_failed_fsync_answers_every_waiter_at_once_and_acknowledges_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def eio(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    store = MessageStore.open(tmp_path / "eio", SYNC)
    store.start_services()
    try:
        # An hour's timeout: the answer below is the failure, not a timeout.
        tracker = DurabilityTracker(store, timeout=3600)
        tracker.start()
        appender = Appender(store, tracker)
        [ok] = await appender.put([Message("E", b"before")])
        assert ok.status is PutStatus.PUT_OK
        monkeypatch.setattr(os, "fdatasync", eio)
        with pytest.raises(StoreFlushFailedError, match="not acknowledged"):
            await appender.put([Message("E", b"during")])
        with pytest.raises(StoreFlushFailedError, match="restart"):
            await appender.put([Message("E", b"after")])
        assert visible(store, "E") == [b"before"]
        tracker.stop()
    finally:
        store.stop_services()
        store.close()

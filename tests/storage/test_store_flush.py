"""store_flush: what a flush writes (CommitLog, ConsumeQueues, index, checkpoint), in order."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from storage import Message, MessageStore, StoreConfig, StoreFlushFailedError
from storage.checkpoint import StoreCheckpoint


def test_stopping_services_flushes_everything(tmp_path: Path) -> None:
    config = StoreConfig(commit_log_file_size=1024 * 1024, flush_interval_commit_log_ms=60_000)
    store = MessageStore.open(tmp_path, config)
    store.start_services()
    result = store.put([Message("T", b"z" * 300)])[0]
    store.stop_services()
    assert store.commit_log.flushed_where >= result.end_offset
    store.close()


def test_checkpoint_records_flush_times_and_survives_reopen(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, StoreConfig(commit_log_file_size=64 * 1024)) as store:
        result = store.put([Message("T", b"stamp")])[0]
        store.flush_all()
        assert store.checkpoint is not None
        assert store.checkpoint.physic_msg_timestamp == result.store_timestamp
        assert store.checkpoint.logics_msg_timestamp == result.store_timestamp
    checkpoint = StoreCheckpoint(tmp_path / "checkpoint")
    try:
        assert checkpoint.physic_msg_timestamp == result.store_timestamp
        assert checkpoint.min_timestamp == result.store_timestamp - 3000
        assert (tmp_path / "checkpoint").stat().st_size == 4096
    finally:
        checkpoint.close()


def test_flush_listeners_hear_each_advance_of_the_flushed_offset(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, StoreConfig(commit_log_file_size=64 * 1024)) as store:
        heard: list[int] = []
        store.flush_listeners.append(heard.append)
        result = store.put([Message("T", b"x" * 100)])[0]
        assert store.flush_commit_log(0) == result.end_offset
        assert store.flush_commit_log(0) == result.end_offset  # nothing new: nobody told
        assert heard == [result.end_offset]


def test_only_a_thorough_consume_queue_flush_writes_the_index_and_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with MessageStore.open(tmp_path, StoreConfig(commit_log_file_size=64 * 1024)) as store:
        store.put([Message("T", b"one", properties={"KEYS": "k"})])
        flushed: list[str] = []
        assert store.index_service is not None and store.checkpoint is not None
        monkeypatch.setattr(store.index_service, "flush", lambda: flushed.append("index"))
        monkeypatch.setattr(store.checkpoint, "flush", lambda: flushed.append("checkpoint"))
        store.flush_consume_queues(2)
        assert flushed == []
        store.flush_consume_queues(0)
        assert flushed == ["index", "checkpoint"]


def test_a_failed_fsync_stops_flushing_and_writes_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fsyncgate lesson: after EIO the flushed offset never moves and no fsync is tried
    again (a retry could report success for pages the kernel dropped)."""
    real = os.fdatasync
    calls: list[int] = []

    def eio(fd: int) -> None:
        calls.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    store = MessageStore.open(tmp_path, StoreConfig(commit_log_file_size=64 * 1024))
    flushed = store.put([Message("T", b"on disk")])[0]
    store.flush_all()
    store.put([Message("T", b"in the page cache")])
    monkeypatch.setattr(os, "fdatasync", eio)
    before = store.flushed_offset
    assert store.flush_commit_log(0) == before == flushed.end_offset
    assert store.flush_failed and len(calls) == 1
    assert "fsync of the CommitLog failed (Input/output error)" in store.not_writeable_reason
    store.flush_commit_log(0)
    store.flush_all()
    assert len(calls) == 1, "no fsync after a failed one"
    with pytest.raises(StoreFlushFailedError, match="restart"):
        store.put([Message("T", b"refused")])
    store.close()
    monkeypatch.setattr(os, "fdatasync", real)
    assert (tmp_path / "abort").exists(), "the next open recovers as after a crash"
    with MessageStore.open(tmp_path, StoreConfig(commit_log_file_size=64 * 1024)) as reopened:
        assert reopened.writeable and reopened.check() == []
        assert reopened.get_message("g", "T", 0, 0).messages[0].body == b"on disk"

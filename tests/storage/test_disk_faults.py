"""No space left at each place the store allocates, on a real (small) tmpfs: the failed
operation is refused cleanly, nothing acknowledged is lost, and once space is back the store
goes on by itself (dispatch from where it stopped) and reopens consistent."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage import (
    GetMessageStatus,
    Message,
    MessageStore,
    PutResult,
    StoreConfig,
    StoreDiskFullError,
)
from storage.checkpoint import StoreCheckpoint
from storage.json_file import load_json, save_json
from storage.record.properties import PROPERTY_KEYS
from storage.retention import RetentionConfig
from tests.disk_support import fill_until_free, tmpfs


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "4m") as mount_point:
        yield mount_point


def config(**overrides: Any) -> StoreConfig:
    base = StoreConfig(
        commit_log_file_size=1024 * 1024,
        consume_queue_units_per_file=1000,
        max_hash_slot_num=64,
        max_index_num=256,
        # The watch is not what is tested here: a real ENOSPC is.
        retention=RetentionConfig(disk_space_warning_level_ratio=100),
    )
    return dataclasses.replace(base, **overrides)


def keyed(i: int, size: int = 200) -> Message:
    return Message("T", bytes([i % 251]) * size, properties={PROPERTY_KEYS: f"k{i}"})


def put_until_refused(store: MessageStore, start: int, size: int = 200) -> list[PutResult]:
    acknowledged: list[PutResult] = []
    with pytest.raises(StoreDiskFullError) as refused:
        for i in range(start, start + 20_000):
            acknowledged.append(store.put([keyed(i, size)])[0])
    assert "disk full" in str(refused.value)
    return acknowledged


def bodies_in_queue(store: MessageStore) -> list[bytes]:
    """Every body of queue T/0, in order (pulled in batches)."""
    bodies: list[bytes] = []
    offset = 0
    while True:
        found = store.get_message("g", "T", 0, offset)
        if found.status is not GetMessageStatus.FOUND:
            return bodies
        bodies += [message.body for message in found.messages]
        offset = found.next_begin_offset


def test_no_space_for_an_index_file_stops_dispatch_and_resumes_where_it_stopped(
    disk: Path,
) -> None:
    # An index file fills (128 keys) before the ConsumeQueue's first reserved page (204
    # units) does, so the index file is the first allocation that meets the full disk.
    store = MessageStore.open(disk / "store", config(max_index_num=128))
    try:
        acknowledged = [store.put([keyed(i)])[0] for i in range(10)]
        ballast = fill_until_free(disk / "ballast", 0)
        acknowledged += put_until_refused(store, 10)
        assert store.dispatch_stalled and not store.writeable
        assert "cannot write an index file" in store.not_writeable_reason
        # Reads keep working; the record that met the full disk is stored (and in its
        # ConsumeQueue, written first) but not yet in the index.
        last = len(acknowledged) - 1
        assert len(bodies_in_queue(store)) == len(acknowledged)
        assert store.query_message("T", f"k{last}") == []
        with pytest.raises(StoreDiskFullError):  # a retry still finds no space
            store.put([keyed(99_999)])

        ballast.unlink()
        assert store.retry_dispatch()
        assert store.writeable and not store.dispatch_stalled
        assert bodies_in_queue(store) == [
            store.look_message_by_offset(r.physical_offset).body for r in acknowledged
        ]
        assert [m.body for m in store.query_message("T", f"k{last}")] == [keyed(last).body]
        acknowledged.append(store.put([keyed(last + 1)])[0])
    finally:
        store.close()
    with MessageStore.open(disk / "store", config(max_index_num=128)) as reopened:
        assert reopened.check() == []
        assert reopened.max_offset_in_queue("T", 0) == len(acknowledged)


def test_no_space_for_a_consume_queue_file_refuses_cleanly(disk: Path) -> None:
    store = MessageStore.open(disk / "store", config(consume_queue_units_per_file=50))
    try:
        acknowledged = [store.put([keyed(i)])[0] for i in range(10)]
        ballast = fill_until_free(disk / "ballast", 0)
        acknowledged += put_until_refused(store, 10)
        assert "cannot write a ConsumeQueue file (disk full)" in store.not_writeable_reason
        ballast.unlink()
        assert store.retry_dispatch()
        assert len(bodies_in_queue(store)) == len(acknowledged)
    finally:
        store.close()
    with MessageStore.open(disk / "store", config(consume_queue_units_per_file=50)) as reopened:
        assert reopened.check() == []


def test_no_space_for_a_commit_log_file_refuses_and_resumes_once_space_is_back(
    disk: Path,
) -> None:
    small = config(commit_log_file_size=64 * 1024, max_index_num=100_000, max_hash_slot_num=1000)
    store = MessageStore.open(disk / "store", small)
    try:
        store.put([keyed(0)])
        ballast = fill_until_free(disk / "ballast", 0)
        acknowledged = put_until_refused(store, 1, size=2000)
        assert store.flags.disk_full and "CommitLog" in store.not_writeable_reason
        for result in acknowledged:
            assert store.look_message_by_id(result.msg_id) is not None
        ballast.unlink()
        store.disk_watch.check()  # what the disk watch thread does every 200 ms
        assert store.writeable
        store.put([keyed(0)])
    finally:
        store.close()
    with MessageStore.open(disk / "store", small) as reopened:
        assert reopened.check() == []
        assert reopened.max_offset_in_queue("T", 0) == len(acknowledged) + 2


def test_no_space_for_a_config_file_keeps_its_last_saved_version(disk: Path) -> None:
    path = disk / "config" / "consumerOffset.json"
    save_json(path, {"offsetTable": {"T@g": {"0": 1}}})
    fill_until_free(disk / "ballast", 0)
    with pytest.raises(StoreDiskFullError, match=r"consumerOffset\.json"):
        save_json(path, {"offsetTable": {"T@g": {"0": 2}}, "pad": "x" * 10_000})
    assert load_json(path) == {"offsetTable": {"T@g": {"0": 1}}}
    assert sorted(p.name for p in path.parent.iterdir()) == ["consumerOffset.json"]
    assert json.loads(path.read_text()) == {"offsetTable": {"T@g": {"0": 1}}}


def test_no_space_for_the_checkpoint_fails_at_open_not_with_a_signal(disk: Path) -> None:
    fill_until_free(disk / "ballast", 0)
    with pytest.raises(OSError, match="No space left"):
        StoreCheckpoint(disk / "checkpoint")

"""checkpoint: three big-endian longs in a 4096-byte file, and where abnormal recovery starts."""

from __future__ import annotations

import struct
import time
from pathlib import Path

from storage import Message, MessageStore, StoreConfig
from storage.checkpoint import CHECKPOINT_SIZE, StoreCheckpoint


def test_values_reach_the_file_on_flush_and_come_back_on_open(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    checkpoint = StoreCheckpoint(path)
    assert (checkpoint.physic_msg_timestamp, checkpoint.logics_msg_timestamp) == (0, 0)
    checkpoint.physic_msg_timestamp = 1_700_000_005_000
    checkpoint.logics_msg_timestamp = 1_700_000_009_000  # dispatched, not yet flushed
    checkpoint.flushed_logics_msg_timestamp = 1_700_000_004_000
    checkpoint.index_msg_timestamp = 1_700_000_001_000
    checkpoint.flush()
    assert path.stat().st_size == CHECKPOINT_SIZE == 4096
    head = path.read_bytes()[:24]
    assert struct.unpack(">qqq", head) == (1_700_000_005_000, 1_700_000_004_000, 1_700_000_001_000)
    checkpoint.close()
    again = StoreCheckpoint(path)
    try:
        assert again.index_msg_timestamp == 1_700_000_001_000
        assert again.min_timestamp == 1_700_000_004_000 - 3000  # the smaller, less 3 s
    finally:
        again.close()


def test_a_file_of_another_size_starts_from_zero(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(b"\x01" * 100)  # torn by a crash while it was being created
    checkpoint = StoreCheckpoint(path)
    try:
        assert checkpoint.physic_msg_timestamp == 0 and checkpoint.min_timestamp == 0
        assert path.stat().st_size == CHECKPOINT_SIZE
    finally:
        checkpoint.close()


def test_sealing_an_index_file_never_writes_a_logics_time_ahead_of_the_queues(
    tmp_path: Path,
) -> None:
    """An index file that fills up writes the checkpoint between ConsumeQueue flushes: the
    logics time it writes is the last one a ConsumeQueue flush made durable."""
    config = StoreConfig(commit_log_file_size=64 * 1024, max_hash_slot_num=8, max_index_num=4)
    with MessageStore.open(tmp_path, config) as store:
        first = store.put([Message("T", b"a", properties={"KEYS": "k0"})])[0]
        store.flush_all()
        time.sleep(0.005)  # later store times (ms) for what follows
        for i in range(1, 10):  # fills index files: each seal writes the checkpoint
            store.put([Message("T", b"b", properties={"KEYS": f"k{i}"})])
        head = (tmp_path / "checkpoint").read_bytes()[:24]
        assert store.checkpoint is not None
        assert store.checkpoint.logics_msg_timestamp > first.store_timestamp
        assert store.checkpoint.index_msg_timestamp > 0, "an index file was sealed"
        assert struct.unpack(">qqq", head)[1] == first.store_timestamp

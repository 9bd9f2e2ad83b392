"""A child process for the crash tests: appends until killed, printing every acknowledgement.

Usage: ``python -m tests.storage.crash_writer STORE_DIR sync|async ROUND``

Each line on stdout is ``seq msg_id topic queue_id queue_offset`` and is printed only after
the put is acknowledged (in SYNC_FLUSH: after the group commit reports it on disk).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from storage import FlushDiskType, Message, MessageStore, StoreConfig
from tests.storage.conftest import FlushWaiter

TOPICS = ("CrashA", "CrashB", "%RETRY%crash")


def crash_config(mode: str) -> StoreConfig:
    flush = FlushDiskType.SYNC_FLUSH if mode == "sync" else FlushDiskType.ASYNC_FLUSH
    return StoreConfig(
        commit_log_file_size=64 * 1024,
        consume_queue_units_per_file=50,
        flush_disk_type=flush,
        flush_interval_commit_log_ms=20,
        flush_interval_consume_queue_ms=50,
        flush_consume_queue_thorough_interval_ms=200,
        flush_commit_log_thorough_interval_ms=200,
    )


def body_of(round_no: int, seq: int) -> bytes:
    """A body the parent can re-derive to check that a message is intact."""
    digest = hashlib.sha256(f"{round_no}:{seq}".encode()).digest()
    return f"{round_no}:{seq}:".encode() + digest * (1 + seq % 20)


def main() -> None:
    store_dir, mode, round_no = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    store = MessageStore.open(store_dir, crash_config(mode))
    store.start_services()
    waiter = FlushWaiter(store)
    seq = 0
    while True:
        topic = TOPICS[seq % len(TOPICS)]
        message = Message(
            topic,
            body_of(round_no, seq),
            queue_id=seq % 3,
            properties={"TAGS": f"t{seq % 4}", "KEYS": f"k{round_no}-{seq}"},
        )
        result = store.put([message])[0]
        if mode == "sync":
            if not waiter.wait(result.end_offset, timeout=5):
                continue  # FLUSH_DISK_TIMEOUT: stored but not acknowledged
            store.dispatch_pending(store.flushed_offset)
        print(seq, result.msg_id, topic, result.queue_id, result.queue_offset, flush=True)
        seq += 1


if __name__ == "__main__":
    main()

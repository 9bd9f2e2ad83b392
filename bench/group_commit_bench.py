"""SYNC_FLUSH group commit: 64 concurrent senders vs one fsync per message.

Run by hand: ``uv run python bench/group_commit_bench.py [--seconds 5]``. Both sides write
200-byte messages to files in the same temporary directory. The baseline appends each
record to a mapped file and calls ``os.fdatasync`` before the next one: what a store
without group commit would do. spoolmq's side runs 64 asyncio senders against one
SYNC_FLUSH store; each awaits its own flush, and one flush serves every waiting put.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import shutil
import tempfile
import time
from pathlib import Path

from services.durability import DurabilityTracker
from storage import FlushDiskType, Message, MessageStore, StoreConfig
from storage.record.encode import encode_message

SENDERS = 64


def one_fsync_per_message(root: Path, seconds: float) -> float:
    record = encode_message(Message("BenchTopic", b"x" * 200, properties={"TAGS": "TagA"}))
    path = root / "baseline"
    size = 256 * 1024 * 1024
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    os.posix_fallocate(fd, 0, size)
    buffer = mmap.mmap(fd, size)
    count = 0
    position = 0
    deadline = time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < deadline and position + len(record) < size:
        buffer[position : position + len(record)] = record
        position += len(record)
        os.fdatasync(fd)
        count += 1
    elapsed = time.perf_counter() - started
    buffer.close()
    os.close(fd)
    return count / elapsed


async def group_commit(root: Path, seconds: float) -> float:
    config = StoreConfig(
        commit_log_file_size=256 * 1024 * 1024, flush_disk_type=FlushDiskType.SYNC_FLUSH
    )
    store = MessageStore.open(root / "store", config)
    store.start_services()
    deadline = time.perf_counter() + seconds
    acknowledged = 0

    durability = DurabilityTracker(store)
    durability.start()

    async def put_durably(message: Message) -> None:
        result = store.put([message])[0]
        if not await durability.wait(result.end_offset):
            raise RuntimeError("flush timed out")

    async def sender(number: int) -> None:
        nonlocal acknowledged
        body = b"x" * 200
        while time.perf_counter() < deadline:
            await put_durably(
                Message("BenchTopic", body, queue_id=number % 8, properties={"TAGS": "TagA"})
            )
            acknowledged += 1

    started = time.perf_counter()
    await asyncio.gather(*(sender(n) for n in range(SENDERS)))
    elapsed = time.perf_counter() - started
    store.stop_services()
    durability.stop()
    store.close()
    return acknowledged / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spoolmq-groupcommit-"))
    try:
        baseline = one_fsync_per_message(root, args.seconds)
        grouped = asyncio.run(group_commit(root, args.seconds))
        print(f"one fdatasync per message:        {baseline:10,.0f} msgs/s")
        print(f"group commit, {SENDERS} senders:         {grouped:10,.0f} msgs/s")
        print(f"ratio: {grouped / baseline:.1f}x (target >= 10x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

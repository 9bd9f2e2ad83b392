"""Recovery scan rate: abnormal recovery of a large CommitLog vs a raw mmap read + CRC loop.

Run by hand: ``uv run python bench/recovery_bench.py [--mib 256]``. Builds a store of
200-byte messages, leaves ``abort`` behind (so the next open is an abnormal recovery that
checks every CRC from the first file), and times ``MessageStore.open`` as the server runs
it: recovery and ConsumeQueue repair before serving, the key index rebuilt afterwards
(timed separately). The baseline walks
the same files with ``struct.unpack_from`` + ``zlib.crc32`` of each body and nothing else.
"""

from __future__ import annotations

import argparse
import mmap
import shutil
import struct
import tempfile
import time
import zlib
from pathlib import Path

from storage import Message, MessageStore, StoreConfig

FILE_SIZE = 64 * 1024 * 1024
_HEAD = struct.Struct(">iii")


def build(root: Path, mib: int) -> int:
    config = StoreConfig(commit_log_file_size=FILE_SIZE)
    body = b"x" * 200
    count = 0
    with MessageStore.open(root, config) as store:
        target = mib * 1024 * 1024
        while store.commit_log.max_offset < target:
            for _ in range(10_000):
                store.put(
                    [
                        Message(
                            "BenchTopic",
                            body,
                            queue_id=count % 8,
                            properties={"TAGS": "TagA", "KEYS": f"k{count}"},
                        )
                    ]
                )
                count += 1
    return count


def raw_scan(root: Path) -> int:
    """The baseline: read TOTALSIZE, magic and CRC, CRC the body, step to the next record."""
    count = 0
    for path in sorted((root / "commitlog").iterdir()):
        with path.open("rb") as f:
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        position = 0
        size = len(buffer)
        while position + 8 <= size:
            total, magic, crc = _HEAD.unpack_from(buffer, position)
            if magic != -626843481:
                break
            body_length = struct.unpack_from(">i", buffer, position + 84)[0]
            body = buffer[position + 88 : position + 88 + body_length]
            if zlib.crc32(body) & 0x7FFFFFFF != crc:
                break
            position += total
            count += 1
        buffer.close()
    return count


def recover(root: Path) -> tuple[float, int, float]:
    """Time to a store that serves (as the server opens it), then the index rebuild."""
    (root / "abort").touch()
    (root / "checkpoint").unlink(missing_ok=True)  # min timestamp 0: scan from the first file
    config = StoreConfig(commit_log_file_size=FILE_SIZE, index_catch_up_on_open=False)
    started = time.perf_counter()
    store = MessageStore.open(root, config)
    elapsed = time.perf_counter() - started
    count = sum(store.max_offset_in_queue("BenchTopic", q) for q in range(8))
    started = time.perf_counter()
    store.catch_up_index()
    index_elapsed = time.perf_counter() - started
    store.close()
    return elapsed, count, index_elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=256)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spoolmq-recovery-"))
    try:
        count = build(root, args.mib)
        size = sum(p.stat().st_size for p in (root / "commitlog").iterdir()) / 1024 / 1024
        started = time.perf_counter()
        raw_count = raw_scan(root)
        raw = time.perf_counter() - started
        elapsed, recovered, index_elapsed = recover(root)
        assert raw_count == count == recovered, (raw_count, count, recovered)
        print(f"store: {count:,} records in {size:.0f} MiB of CommitLog")
        print(f"raw mmap read + CRC:  {count / raw:12,.0f} records/s  ({size / raw:7.1f} MiB/s)")
        rate = f"{count / elapsed:12,.0f} records/s  ({size / elapsed:7.1f} MiB/s)"
        print(f"abnormal recovery:    {rate}")
        print(f"ratio: {raw / elapsed:.2f}x of raw (target >= 0.5x)")
        print(f"then, in the background: index rebuilt at {count / index_elapsed:,.0f} records/s")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

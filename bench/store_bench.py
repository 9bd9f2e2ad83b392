"""Store throughput next to a raw mmap baseline measured in the same run, on the same files.

1. Append: ``MessageStore.put_message`` of 200-byte bodies with one tag and one key, round
   robin over 8 queues, dispatch to the ConsumeQueues included — against a loop that only
   packs the same records (``struct.pack_into`` of the header, the body/topic/properties
   copies, ``zlib.crc32`` of the body) into an mmap'd file of the same size.
2. Pull: ``get_message`` in 32-message batches over every queue until all messages are read
   — against a loop that walks the store's own CommitLog mmap, unpacking each record header
   and checking its body CRC. Two ways, each against the same raw loop: decoded
   (``StoredMessage``) and views (``views=True``: what a consumer is shown of each record, its
   body and properties decoded, what the HTTP pull renders from).

Run by hand (not part of the test suite)::

    uv run python bench/store_bench.py                  # 300k messages, 256 MiB files
    uv run python bench/store_bench.py --count 1000000 --file-size-mib 1024
    uv run python bench/store_bench.py --index          # IndexFile built during dispatch too

Prints messages per second for each side and the ratio store / raw (target >= 0.25).
"""

from __future__ import annotations

import argparse
import gc
import mmap
import os
import platform
import shutil
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

# Run as a script from the repository root or from bench/: make ``storage`` importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage import GetMessageStatus, MessageStore, StoreConfig
from storage.mapped_file import MappedFile, offset_to_file_name
from storage.record.message import Message

TOPIC = "BenchTopic"
QUEUES = 8
BODY_SIZE = 200
BATCH = 32
MAGIC = -626843481  # 0xDAA320A7
# TOTALSIZE .. BODY LENGTH for IPv4 born and store hosts (reference §2.2): 88 bytes.
HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")
SHORT = struct.Struct(">h")


def make_messages(count: int) -> list[Message]:
    body = bytes(range(256))[:BODY_SIZE]
    return [
        Message(
            topic=TOPIC,
            body=body,
            queue_id=i % QUEUES,
            properties={"TAGS": "TagA", "KEYS": f"key-{i:010d}"},
            born_timestamp=1_700_000_000_000,
            born_host=("10.0.0.1", 50000),
        )
        for i in range(count)
    ]


# ---------------------------------------------------------------- append


def bench_store_append(root: Path, config: StoreConfig, messages: list[Message]) -> float:
    """Seconds to put every message (dispatch included); the store is left closed on disk."""
    store = MessageStore.open(root, config)
    put = store.put
    try:
        start = time.perf_counter()
        for message in messages:
            put([message])
        elapsed = time.perf_counter() - start
    finally:
        store.close()
    return elapsed


def bench_raw_append(directory: Path, file_size: int, messages: list[Message]) -> float:
    """Seconds to pack the same records into a fresh mmap'd file: header, copies, CRC."""
    directory.mkdir(parents=True, exist_ok=True)
    mapped = MappedFile(directory / offset_to_file_name(0), file_size, create=True)
    buffer = mapped.buffer
    pack_header = HEADER.pack_into
    topic = TOPIC.encode()
    born = bytes([10, 0, 0, 1])
    store = bytes([127, 0, 0, 1])
    queue_offsets = [0] * QUEUES
    try:
        start = time.perf_counter()
        position = 0
        for message in messages:
            body = message.body
            properties = f"TAGS\x01TagA\x02KEYS\x01{message.properties['KEYS']}\x02".encode()
            size = HEADER.size + len(body) + 1 + len(topic) + 2 + len(properties)
            queue_id = message.queue_id
            pack_header(
                buffer,
                position,
                size,
                MAGIC,
                zlib.crc32(body) & 0x7FFFFFFF,
                queue_id,
                0,
                queue_offsets[queue_id],
                position,
                0,
                message.born_timestamp,
                born,
                50000,
                1_700_000_000_001,
                store,
                10911,
                0,
                0,
                len(body),
            )
            queue_offsets[queue_id] += 1
            p = position + HEADER.size
            buffer[p : p + len(body)] = body
            p += len(body)
            buffer[p] = len(topic)
            buffer[p + 1 : p + 1 + len(topic)] = topic
            p += 1 + len(topic)
            SHORT.pack_into(buffer, p, len(properties))
            buffer[p + 2 : p + 2 + len(properties)] = properties
            position += size
        elapsed = time.perf_counter() - start
    finally:
        mapped.close()
    return elapsed


# ---------------------------------------------------------------- pull


PULL_MODES = ("pull", "pull_views")


def bench_store_pull(root: Path, config: StoreConfig, count: int, mode: str = "pull") -> float:
    """Seconds to read every message back through ``get_message``, 32 per call: decoded
    (``pull``) or as views (``pull_views``)."""
    store = MessageStore.open(root, config)
    get = store.get_message
    views = mode == "pull_views"
    try:
        read = 0
        start = time.perf_counter()
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                result = get("bench", TOPIC, queue_id, offset, BATCH, views=views)
                if result.status is not GetMessageStatus.FOUND:
                    break
                if views:
                    read += len(result.views)
                else:
                    read += len(result.messages)
                offset = result.next_begin_offset
        elapsed = time.perf_counter() - start
    finally:
        store.close()
    if read != count:
        raise SystemExit(f"pull read {read} messages, expected {count}")
    return elapsed


def bench_raw_pull(root: Path, file_size: int, count: int) -> float:
    """Seconds to walk the store's CommitLog records in the mmap: unpack header + CRC check."""
    files = sorted((root / "commitlog").iterdir())
    unpack_header = HEADER.unpack_from
    crc32 = zlib.crc32
    read = 0
    elapsed = 0.0
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            buffer = mmap.mmap(fd, file_size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        try:
            start = time.perf_counter()
            position = 0
            while read < count and position + HEADER.size <= file_size:
                header = unpack_header(buffer, position)
                size, magic, crc = header[0], header[1], header[2]
                if magic != MAGIC:
                    break
                body_start = position + HEADER.size
                body = buffer[body_start : body_start + header[-1]]
                if crc32(body) & 0x7FFFFFFF != crc:
                    raise SystemExit(f"CRC mismatch at {position}")
                read += 1
                position += size
            elapsed += time.perf_counter() - start
        finally:
            buffer.close()
    if read != count:
        raise SystemExit(f"raw pull read {read} records, expected {count}")
    return elapsed


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--count", type=int, default=300_000, help="messages (default 300000)")
    parser.add_argument(
        "--file-size-mib", type=int, default=256, help="CommitLog file size in MiB (default 256)"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="rounds; the best round of each side counts"
    )
    parser.add_argument(
        "--index",
        action="store_true",
        help="also build the IndexFile during dispatch (off by default: CommitLog → "
        "ConsumeQueue dispatch only)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temp directory")
    args = parser.parse_args(argv)

    file_size = args.file_size_mib * 1024 * 1024
    config = StoreConfig(commit_log_file_size=file_size, message_index_enable=args.index)
    messages = make_messages(args.count)
    # The prebuilt messages are the harness's, not the store's: keep the cyclic GC from
    # walking them over and over while the store allocates (a server holds no such list).
    gc.collect()
    gc.freeze()
    times: dict[str, list[float]] = {
        name: [] for name in ("raw_append", "append", "raw_pull", *PULL_MODES)
    }
    for _ in range(args.repeat):
        # A fresh directory per round: every round appends into new, never-touched files.
        workdir = Path(tempfile.mkdtemp(prefix="spoolmq-bench-", dir=args.dir))
        try:
            times["raw_append"].append(bench_raw_append(workdir / "raw", file_size, messages))
            times["append"].append(bench_store_append(workdir / "store", config, messages))
            times["raw_pull"].append(bench_raw_pull(workdir / "store", file_size, args.count))
            for mode in PULL_MODES:
                times[mode].append(bench_store_pull(workdir / "store", config, args.count, mode))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

    n = args.count
    best = {name: min(values) for name, values in times.items()}
    print(
        f"spoolmq store bench: {n:,} messages, {BODY_SIZE}-byte bodies, {QUEUES} queues, "
        f"{args.file_size_mib} MiB CommitLog files, index {'on' if args.index else 'off'}, "
        f"best of {args.repeat}"
    )
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    rows = [
        ("append", n / best["append"], n / best["raw_append"]),
        (f"pull ({BATCH}/batch)", n / best["pull"], n / best["raw_pull"]),
        ("pull views", n / best["pull_views"], n / best["raw_pull"]),
    ]
    print(f"{'':20} {'store msgs/s':>14} {'raw msgs/s':>14} {'ratio':>7}  target")
    for name, store_rate, raw_rate in rows:
        ratio = store_rate / raw_rate
        verdict = "ok" if ratio >= 0.25 else "BELOW"
        print(f"{name:20} {store_rate:14,.0f} {raw_rate:14,.0f} {ratio:7.3f}  >=0.25 {verdict}")
    # Each round measures both sides back to back; on a busy machine compare these too.
    sides = [("append", "raw_append")] + [(mode, "raw_pull") for mode in PULL_MODES]
    for side, raw in sides:
        ratios = [r / s for r, s in zip(times[raw], times[side], strict=True)]
        print(f"{side} ratio per round: " + ", ".join(f"{r:.3f}" for r in ratios))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

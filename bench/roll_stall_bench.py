"""How long the append that rolls to a new CommitLog file stalls the calling thread.

Two CommitLogs over files of the same size, in the same run:

* ``inline``: the roll creates the next file on the caller's thread (``posix_fallocate`` of
  the whole file, then ``mmap``) -- every file was made this way before pre-allocation;
* ``ahead``: an :class:`~storage.allocate_service.AllocateMappedFileService` prepared the
  file in its thread while the previous one was filled; the roll renames it into place.

Each file is filled with 1 MiB records; before the rolling append the ``ahead`` side waits
until its worker is idle (in a broker a roll comes long after the previous one). Only the
rolling append is timed, with ``time.perf_counter``, next to the median of the ordinary
appends. The two sides alternate roll by roll so that both see the same disk and page
cache state. Old files are deleted as the log moves on.

Run by hand (not part of the test suite)::

    uv run python bench/roll_stall_bench.py                     # 8 rolls of 256 MiB files
    uv run python bench/roll_stall_bench.py --rolls 12 --file-size-mib 1024

Prints, per side, the median and the spread (min .. max) of the rolling appends, and the
ratio inline / ahead of the medians.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# Run as a script from the repository root or from bench/: make ``storage`` importable.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from storage.allocate_service import AllocateMappedFileService
from storage.commit_log import CommitLog
from storage.record.encode import EncodedMessage
from storage.record.message import Message

RECORD_BODY = 1024 * 1024
STORE_HOST = ("127.0.0.1", 10911)


@dataclass
class Side:
    """One CommitLog and the times measured on it."""

    name: str
    log: CommitLog
    allocator: AllocateMappedFileService | None
    roll_seconds: list[float] = field(default_factory=list)
    append_seconds: list[float] = field(default_factory=list)


def make_side(root: Path, name: str, file_size: int, ahead: bool) -> Side:
    log = CommitLog(root / name / "commitlog", file_size, STORE_HOST)
    allocator = AllocateMappedFileService(root / name / "prepared") if ahead else None
    log.queue.allocator = allocator
    log.load()
    return Side(name, log, allocator)


def fill_and_roll(side: Side, record: EncodedMessage) -> None:
    """Append until the next append rolls; time that one (and the ordinary ones)."""
    log = side.log
    files_before = len(log.queue.files)
    while True:
        last = log.queue.last_file()
        rolls = last is None or record.size + 8 > last.remaining
        if rolls and side.allocator is not None:
            side.allocator.wait_until_idle()
        started = time.perf_counter()
        log.append(record, 1_700_000_000_000)
        elapsed = time.perf_counter() - started
        if rolls and files_before > 0:
            side.roll_seconds.append(elapsed)
            break
        if rolls:  # the very first file of the log: not a roll
            files_before = len(log.queue.files)
            continue
        side.append_seconds.append(elapsed)
    log.queue.delete_first_files(len(log.queue.files) - 1)


def close(side: Side) -> None:
    side.log.close()
    if side.allocator is not None:
        side.allocator.shutdown()


def millis(seconds: float) -> str:
    return f"{seconds * 1000:8.3f} ms"


def report(side: Side) -> None:
    rolls = side.roll_seconds
    print(
        f"{side.name:>6}: roll median {millis(statistics.median(rolls))}, "
        f"spread {millis(min(rolls))} .. {millis(max(rolls))}; "
        f"ordinary append median {millis(statistics.median(side.append_seconds))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rolls", type=int, default=8, help="rolls timed per side")
    parser.add_argument("--file-size-mib", type=int, default=256, help="CommitLog file size")
    parser.add_argument("--dir", type=Path, default=None, help="scratch directory (default: tmp)")
    args = parser.parse_args()
    file_size = args.file_size_mib * 1024 * 1024
    root = Path(tempfile.mkdtemp(prefix="roll-stall-", dir=args.dir))
    record = EncodedMessage(
        Message("BenchTopic", b"x" * RECORD_BODY), store_v6=False, max_body_size=RECORD_BODY
    )
    sides = [make_side(root, "inline", file_size, False), make_side(root, "ahead", file_size, True)]
    print(
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{args.file_size_mib} MiB files, {args.rolls} rolls per side, in {root}"
    )
    try:
        for side in sides:  # the first file of each log, not timed
            fill_and_roll(side, record)
            side.roll_seconds.clear()
        for _ in range(args.rolls):
            for side in sides:
                fill_and_roll(side, record)
        for side in sides:
            report(side)
        inline, ahead = (statistics.median(side.roll_seconds) for side in sides)
        print(f"ratio inline / ahead (median roll stall): {inline / ahead:.1f}x")
    finally:
        for side in sides:
            close(side)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Offline truncation of a replica's CommitLog to the offset its epochs agree on.

Run before the store opens (no lock holder, no mapping): the file holding ``offset`` is
zeroed from there to its end and every later file is deleted. The store's recovery then
ends the CommitLog at ``offset``, cuts the ConsumeQueues beyond it and re-dispatches; the
index ignores entries past the max offset. The epoch entries that start after ``offset``
are dropped too.

A replica that rejoins a new master truncates what the old epoch wrote but no in-sync
replica confirmed: nothing acknowledged under sync replication is lost, nothing diverges.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage.epoch_file import EpochFile
from storage.fs import fsync_directory

_ZEROS = bytes(1024 * 1024)


def truncate_commit_log(root: Path, offset: int) -> int:
    """Cut the CommitLog of the store at ``root`` at ``offset``; the bytes removed."""
    directory = root / "commitlog"
    if not directory.is_dir():
        return 0
    removed = 0
    for path in sorted(p for p in directory.iterdir() if p.is_file() and p.name.isdigit()):
        start = int(path.name)
        size = path.stat().st_size
        if start + size <= offset:
            continue
        if start >= offset:
            removed += _written_bytes(path)
            path.unlink()
            continue
        removed += _zero_from(path, offset - start, size)
    fsync_directory(directory)
    EpochFile(root).load().truncate(offset)
    return removed


def _zero_from(path: Path, position: int, size: int) -> int:
    """Overwrite ``path`` with zeros from ``position`` to its end; the non-zero bytes cut."""
    cut = 0
    fd = os.open(path, os.O_RDWR)
    try:
        at = position
        while at < size:
            length = min(len(_ZEROS), size - at)
            chunk = os.pread(fd, length, at)
            if chunk.count(0) != len(chunk):
                cut = at + len(chunk.rstrip(b"\0")) - position
                os.pwrite(fd, _ZEROS[:length], at)
            at += length
        os.fsync(fd)
    finally:
        os.close(fd)
    return cut


def _written_bytes(path: Path) -> int:
    with open(path, "rb") as file:
        return len(file.read().rstrip(b"\0"))

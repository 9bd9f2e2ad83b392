"""Small real file systems for disk-fault tests: a tmpfs mounted for one test (and unmounted
by it), grown in place, and filled with a ballast file to leave a chosen amount free.

Mounting needs root (the test machines run as root); tests that need it skip nowhere: a
missing privilege fails them loudly.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"8m"``) at ``mount_point`` for the block; unmounted after."""
    mount_point.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)], check=True
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def resize(mount_point: Path, size: str) -> None:
    """Grow (or shrink) a mounted tmpfs in place: what an operator does to a full disk."""
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount_point)], check=True)


def fill_until_free(path: Path, free_bytes: int) -> Path:
    """Write a ballast file at ``path`` that leaves about ``free_bytes`` free; its path."""
    stats = os.statvfs(path.parent)
    available = stats.f_bavail * stats.f_frsize
    size = max(0, available - free_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if size:
            os.posix_fallocate(fd, 0, size)
    finally:
        os.close(fd)
    return path


def free_bytes(path: Path) -> int:
    stats = os.statvfs(path)
    return stats.f_bavail * stats.f_frsize

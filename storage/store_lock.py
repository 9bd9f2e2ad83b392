"""The store directory's lock: one process per store (``flock`` on ``<root>/lock``).

A second process on the same directory fails at once with a clear message instead of
writing into files another process has mapped.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from storage.errors import StoreLockedError


def acquire_store_lock(root: Path) -> int:
    """Lock ``root`` for this process; the lock file's descriptor (keep it open)."""
    path = root / "lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StoreLockedError(
            f"store directory {root} is in use by another process (lock held on {path})"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, b"lock")
    return fd


def release_store_lock(fd: int) -> None:
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)

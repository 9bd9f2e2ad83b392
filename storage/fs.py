"""File-system helpers shared by the store's file modules.

One place for what several modules need of the file system itself (not of a file's
content): making a directory entry durable, reserving a file's blocks.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Fsync ``directory`` so that files created, renamed or deleted in it survive a power loss.

    A file's own fsync makes its bytes durable, not its name: after a crash a new or renamed
    file can be missing unless the directory holding it was fsynced too.
    """
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def reserve_blocks(fd: int, size: int) -> None:
    """Give the file ``fd`` ``size`` bytes with real blocks where the file system can.

    Writing through a mapping into a hole of a file on a full disk kills the process with
    SIGBUS; reserving the blocks up front turns that into an ENOSPC ``OSError`` here. Where
    the file system cannot allocate ahead, the file just gets its size.
    """
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        os.ftruncate(fd, size)

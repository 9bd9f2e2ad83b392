"""File-system helpers shared by the store's file modules.

One place for what several modules need of the file system itself (not of a file's
content): making a directory entry durable.
"""

from __future__ import annotations

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

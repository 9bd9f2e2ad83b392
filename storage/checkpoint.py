"""StoreCheckpoint: a 4096-byte mapped file of three big-endian timestamps.

    offset  field
         0  physicMsgTimestamp   store time of the last record in a fully flushed CommitLog
         8  logicsMsgTimestamp   store time of the last message dispatched to a ConsumeQueue
        16  indexMsgTimestamp    end time of the last full, flushed index file

Abnormal recovery starts from the newest CommitLog file whose first record is older than
``min_timestamp`` (the smaller of the first two, less three seconds).

The logics time the file gets is never the dispatcher's latest (``logics_msg_timestamp``) but
the one a thorough ConsumeQueue flush made durable (``flushed_logics_msg_timestamp``): the
checkpoint is also written when an index file fills up, between ConsumeQueue flushes, and a
logics time ahead of the ConsumeQueues on disk made recovery after a power cut start past
records whose units were lost (RocketMQ writes the latest there).
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Final

from storage.fs import reserve_blocks

CHECKPOINT_SIZE: Final = 4096
_LAYOUT: Final = struct.Struct(
    ">q"  # physicMsgTimestamp
    "q"  # logicsMsgTimestamp
    "q"  # indexMsgTimestamp
)


class StoreCheckpoint:
    """The checkpoint file; values change in memory and reach disk on ``flush``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        existed = path.exists() and path.stat().st_size == CHECKPOINT_SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not existed:
                # Real blocks, not a hole: a write through the map into a hole on a full
                # disk is a SIGBUS; here it is an ENOSPC OSError at open.
                reserve_blocks(fd, CHECKPOINT_SIZE)
            self._buffer = mmap.mmap(fd, CHECKPOINT_SIZE, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        values = _LAYOUT.unpack_from(self._buffer, 0) if existed else (0, 0, 0)
        self.physic_msg_timestamp: int = int(values[0])
        self.logics_msg_timestamp: int = int(values[1])
        self.index_msg_timestamp: int = int(values[2])
        # Every ConsumeQueue unit of a message stored up to this time is on disk.
        self.flushed_logics_msg_timestamp: int = self.logics_msg_timestamp

    @property
    def min_timestamp(self) -> int:
        """``max(0, min(physic, logics) - 3000)``: where abnormal recovery may start."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def flush(self) -> None:
        _LAYOUT.pack_into(
            self._buffer,
            0,
            self.physic_msg_timestamp,
            self.flushed_logics_msg_timestamp,
            self.index_msg_timestamp,
        )
        self._buffer.flush()

    def close(self, flush: bool = True) -> None:
        """Unmap; first write the values down unless ``flush`` is False (after a failed
        fsync, when nothing more may be trusted to the disk)."""
        if not self._buffer.closed:
            try:
                if flush:
                    self.flush()
            finally:
                self._buffer.close()

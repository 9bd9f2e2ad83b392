"""TimerCheckpoint: ``config/timercheck``, where the timer stands (RocketMQ's
``TimerCheckpoint``), one page, big-endian::

    offset  field
         0  lastReadTimeMs          every slot before it has fired
         8  lastTimerLogFlushPos    the timer log is on disk up to here, and the wheel on
                                    disk holds exactly the units below it
        16  lastTimerQueueOffset    the timer topic's ConsumeQueue is enqueued up to here
        24  masterTimerQueueOffset  as the master last reported it (kept for RocketMQ parity)
        32  stateVersion            DataVersion: counter of writes
        40  timestamp               DataVersion: when it was written
        48  precisionMs             spoolmq: the wheel's precision (slots depend on it)

The values live in memory and reach the file on :meth:`flush`.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from pathlib import Path
from typing import Final

_SIZE: Final = 4096
_LAYOUT: Final = struct.Struct(">qqqqqqq")


class TimerCheckpoint:
    """The timer checkpoint file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        existed = path.exists() and path.stat().st_size == _SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if not existed:
                os.ftruncate(fd, _SIZE)
            self._buffer = mmap.mmap(fd, _SIZE, access=mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        values = _LAYOUT.unpack_from(self._buffer, 0) if existed else (0,) * 7
        self.last_read_time_ms: int = values[0]
        self.last_timer_log_flush_pos: int = values[1]
        self.last_timer_queue_offset: int = values[2]
        self.master_timer_queue_offset: int = values[3]
        self.state_version: int = values[4]
        self.timestamp: int = values[5]
        self.precision_ms: int = values[6]

    @property
    def written(self) -> bool:
        """Whether the file has ever been written (a fresh store has none)."""
        return self.state_version > 0

    def flush(self) -> None:
        self.state_version += 1
        self.timestamp = time.time_ns() // 1_000_000
        _LAYOUT.pack_into(
            self._buffer,
            0,
            self.last_read_time_ms,
            self.last_timer_log_flush_pos,
            self.last_timer_queue_offset,
            self.master_timer_queue_offset,
            self.state_version,
            self.timestamp,
            self.precision_ms,
        )
        self._buffer.flush()

    def close(self) -> None:
        if not self._buffer.closed:
            self._buffer.close()

"""Store status for the overview page, ``/readyz`` and ``/metrics``: CommitLog positions,
flush and dispatch lag, whether the store accepts writes, and the disk it takes."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from storage import MessageStore


@dataclass(frozen=True, slots=True)
class StoreGauges:
    """The store's positions and state at one moment."""

    commit_log_min_offset: int
    commit_log_max_offset: int
    flushed_offset: int
    flush_lag_bytes: int  # written but not yet forced to disk
    dispatch_behind_bytes: int  # appended but not yet in a ConsumeQueue
    writeable: bool
    not_writeable_reason: str  # "" while writeable
    flush_mode: str  # ASYNC_FLUSH or SYNC_FLUSH
    disk_full: bool  # over the disk warning ratio, or a file found no space
    flush_failed: bool  # an fsync failed: nothing more is acknowledged until a restart
    dispatch_stalled: bool  # a dispatch failure left records undispatched
    disk_used_ratios: tuple[tuple[str, float], ...] = ()  # (store directory, used / total)


class StoreStatusService:
    """Reads the store's gauges (on the event loop thread) and its disk use (in a thread)."""

    def __init__(self, store: MessageStore, store_dir: Path) -> None:
        self._store = store
        self._store_dir = store_dir

    def gauges(self) -> StoreGauges:
        store = self._store
        max_offset = store.max_physical_offset
        flushed = store.flushed_offset
        return StoreGauges(
            commit_log_min_offset=store.min_physical_offset,
            commit_log_max_offset=max_offset,
            flushed_offset=flushed,
            flush_lag_bytes=max(0, max_offset - flushed),
            dispatch_behind_bytes=store.dispatch_behind_bytes,
            writeable=store.writeable,
            not_writeable_reason=store.not_writeable_reason,
            flush_mode=store.config.flush_disk_type.name,
            disk_full=store.flags.disk_full,
            flush_failed=store.flush_failed,
            dispatch_stalled=store.dispatch_stalled,
            disk_used_ratios=tuple(
                (str(sample.path), sample.ratio) for sample in store.disk_watch.samples
            ),
        )

    def disk_used_bytes(self) -> int:
        """Bytes of disk the store directory takes (blocks, not sizes); blocking: use a thread."""
        total = 0
        stack = [self._store_dir]
        while stack:
            try:
                entries = list(os.scandir(stack.pop()))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(Path(entry.path))
                    else:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
        return total

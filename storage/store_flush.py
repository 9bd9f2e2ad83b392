"""Flushing the store: what reaches the disk, in RocketMQ's order, and the threads that do it.

The CommitLog first (flush listeners hear of every advance; a thorough flush also moves the
checkpoint's physic timestamp), then the ConsumeQueues, and on a thorough ConsumeQueue flush
the index and the checkpoint, whose logics timestamp is the one captured before that flush:
never ahead of what is on disk. The background threads (:mod:`storage.flush_service`) call
:meth:`StoreFlush.flush_commit_log` and :meth:`StoreFlush.flush_consume_queues`.

A failed fsync (EIO, or ENOSPC on a file system that allocates late) is the fsyncgate lesson:
the kernel may have dropped the dirty pages and marked them clean, so a later fsync can
succeed without the data ever reaching the disk. The first failure therefore refuses writes
for good (``Refusal.FLUSH_FAILED``), the flushed offset never moves again, and no further
fsync is tried: nothing more is acknowledged, and a restart recovers from what is on disk.
"""

from __future__ import annotations

from collections.abc import Callable

from storage.checkpoint import StoreCheckpoint
from storage.commit_log import CommitLog
from storage.consume_queue_table import ConsumeQueueTable
from storage.flush_service import (
    DiskWatchService,
    GroupCommitService,
    ServiceThread,
    build_services,
)
from storage.index_service import IndexService
from storage.running_flags import Refusal, RunningFlags
from storage.store_types import FlushListener, StoreConfig


class StoreFlush:
    """Flushes one store's files, and runs its flush and clean threads."""

    def __init__(
        self,
        config: StoreConfig,
        commit_log: CommitLog,
        consume_queue_table: ConsumeQueueTable,
        checkpoint: StoreCheckpoint,
        index_service: IndexService | None,
        listeners: list[FlushListener],
        flags: RunningFlags,
    ) -> None:
        self.config = config
        self.flags = flags
        self.commit_log = commit_log
        self.consume_queue_table = consume_queue_table
        self.checkpoint = checkpoint
        self.index_service = index_service
        self.listeners = listeners
        self._group_commit: GroupCommitService | None = None
        self._services: list[ServiceThread] = []

    def start_services(
        self, clean: Callable[[], object], disk_watch: DiskWatchService | None = None
    ) -> None:
        """Start the flushers (or group commit in SYNC_FLUSH), the cleaner and the disk
        watch threads."""
        if self._services:
            return
        commit_log = self.commit_log
        self._services, self._group_commit = build_services(
            self.config,
            self.flush_commit_log,
            lambda: commit_log.flushed_where,
            lambda: commit_log.max_offset,
            self.flush_consume_queues,
            clean,
            disk_watch,
        )
        for service in self._services:
            service.start()

    def stop_services(self) -> None:
        """Stop every background thread; each does its final flush."""
        services, self._services = self._services, []
        for service in services:
            service.stop()
        self._group_commit = None

    def wake(self) -> None:
        """Ask the group commit (SYNC_FLUSH) to flush now; a no-op in ASYNC_FLUSH."""
        group_commit = self._group_commit
        if group_commit is not None:
            group_commit.wakeup()

    def flush_commit_log(self, least_pages: int = 0) -> int:
        """Force CommitLog pages to disk (callable off the owner thread); the flushed offset.

        Flush listeners hear of every advance, on the flushing thread.
        """
        before = self.commit_log.flushed_where
        if self.flags.flush_failed:
            return before
        try:
            self.commit_log.flush(least_pages)
        except OSError as exc:
            self._failed("the CommitLog", exc)
            return before
        if least_pages == 0:
            stamp = self.commit_log.queue.store_timestamp
            if stamp:
                self.checkpoint.physic_msg_timestamp = stamp
        flushed = self.commit_log.flushed_where
        if flushed != before:
            for listener in self.listeners:
                listener(flushed)
        return flushed

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """Force ConsumeQueue pages; on a thorough flush also the index and the checkpoint."""
        if self.flags.flush_failed:
            return
        checkpoint = self.checkpoint
        logics = checkpoint.logics_msg_timestamp
        try:
            self.consume_queue_table.flush(least_pages)
            if least_pages:
                return
            if self.index_service is not None:
                self.index_service.flush()
            # The value captured before the flush: never ahead of what is on disk.
            checkpoint.flushed_logics_msg_timestamp = logics
            checkpoint.flush()
        except OSError as exc:
            self._failed("the ConsumeQueues, the index or the checkpoint", exc)

    def _failed(self, what: str, exc: OSError) -> None:
        self.flags.refuse(
            Refusal.FLUSH_FAILED,
            f"fsync of {what} failed ({exc.strerror or exc}): nothing more is acknowledged; "
            "restart the broker to recover from what is on disk",
        )

    def flush_all(self) -> None:
        """Every dirty page of every file, and the checkpoint (none after a failed fsync)."""
        if self.flags.flush_failed:
            return
        try:
            self.commit_log.queue.flush_all()
            self.flush_commit_log(0)
            self.consume_queue_table.flush_all()
            self.flush_consume_queues(0)
        except OSError as exc:
            self._failed("the store", exc)

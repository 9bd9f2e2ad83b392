"""Background services of the store: flushers, group commit and the file cleaner.

Each runs on its own daemon thread so that the owner (the event loop) never waits for a
disk. Flushes use ``fdatasync``, which releases the GIL. Each service gets the callables it
drives, not the store.

- ``CommitLogFlusher`` (ASYNC_FLUSH): every 500 ms forces the CommitLog when at least 4
  pages are dirty, and fully at least every 10 s.
- ``GroupCommitService`` (SYNC_FLUSH): woken by a put (``MessageStore.wake_flush``), flushes
  everything written so far; one flush serves every put that arrived while the previous
  one ran. Waiters learn of it through the store's flush listeners.
- ``ConsumeQueueFlusher``: every second, 2 pages; fully every 60 s, then the checkpoint.
- ``CleanService``: every 10 s checks disk use and deletes expired files.
- ``DiskWatchService``: every 200 ms samples the store's file systems (refusing writes over
  the warning ratio, accepting them again below it) and, over the clean-forcibly ratio, runs
  the cleaner at once instead of waiting for its turn.

A pass that raises does not end its thread: the error is logged (once per distinct message)
and kept in ``failure``, and the next pass runs as usual. Disk errors the store expects
(ENOSPC, EIO) are handled where they happen and set the store's running flags.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from storage.store_types import FlushDiskType, StoreConfig

log = logging.getLogger(__name__)

Flush = Callable[[int], object]
"""Flush with a least-pages threshold (0: everything dirty)."""

Offset = Callable[[], int]
"""Reads a CommitLog offset (flushed or written) at call time."""


class ServiceThread:
    """A named daemon thread that runs ``run_once`` every ``interval`` seconds or on wake-up."""

    name = "service"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: Exception | None = None  # the last pass that raised, if any

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"spoolmq-{self.name}", daemon=True)
        self._thread.start()

    def wakeup(self) -> None:
        if not self._wake.is_set():  # a plain read; set() takes a lock
            self._wake.set()

    def stop(self) -> None:
        """Stop the loop, run the final ``on_stop`` work, wait for the thread."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _run(self) -> None:
        while not self._stopped.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stopped.is_set():
                break
            self._guarded(self.run_once)
        self._guarded(self.on_stop)

    def _guarded(self, work: Callable[[], None]) -> None:
        """Run one pass; an error is logged and kept, and the thread goes on."""
        try:
            work()
        except Exception as exc:
            if self.failure is None or str(self.failure) != str(exc):
                log.exception("%s: a pass failed", self.name)
            self.failure = exc
        else:
            self.failure = None

    def run_once(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def on_stop(self) -> None:
        """Work left for shutdown (a last flush)."""


class PeriodicFlusher(ServiceThread):
    """Every ``interval``: flush when ``least_pages`` are dirty; fully every ``thorough``."""

    def __init__(
        self, flush: Flush, interval: float, least_pages: int, thorough_interval: float
    ) -> None:
        super().__init__(interval)
        self.flush = flush
        self.least_pages = least_pages
        self.thorough_interval = thorough_interval
        self._last_thorough = time.monotonic()

    def run_once(self) -> None:
        now = time.monotonic()
        least_pages = self.least_pages
        if now - self._last_thorough >= self.thorough_interval:
            self._last_thorough = now
            least_pages = 0
        self.flush(least_pages)


class CommitLogFlusher(PeriodicFlusher):
    """ASYNC_FLUSH: acknowledged after the page-cache write; forced here in the background."""

    name = "commitlog-flusher"

    def __init__(
        self,
        flush: Flush,
        flushed_offset: Offset,
        interval: float = 0.5,
        least_pages: int = 4,
        thorough_interval: float = 10.0,
    ) -> None:
        super().__init__(flush, interval, least_pages, thorough_interval)
        self.flushed_offset = flushed_offset

    def on_stop(self) -> None:
        # One flush(0) covers one file: repeat while it makes progress.
        for _ in range(10):
            before = self.flushed_offset()
            self.flush(0)
            if self.flushed_offset() == before:
                break


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: each wake-up flushes everything written so far, so many waiting puts
    share one flush."""

    name = "group-commit"

    def __init__(
        self, flush: Flush, flushed_offset: Offset, max_offset: Offset, interval: float = 0.01
    ) -> None:
        super().__init__(interval)
        self.flush = flush
        self.flushed_offset = flushed_offset
        self.max_offset = max_offset

    def run_once(self) -> None:
        # Everything written so far, not just what one put asked for: puts that arrived
        # during the previous flush are served by this one.
        target = self.max_offset()
        # A target may lie past a file roll: one flush(0) call handles one file.
        for _ in range(4):
            before = self.flushed_offset()
            if before >= target:
                return
            self.flush(0)
            if self.flushed_offset() == before:
                return

    def on_stop(self) -> None:
        self.run_once()


class ConsumeQueueFlusher(PeriodicFlusher):
    """Forces ConsumeQueue pages; the thorough flush also writes the checkpoint."""

    name = "consumequeue-flusher"

    def __init__(
        self,
        flush: Flush,
        interval: float = 1.0,
        least_pages: int = 2,
        thorough_interval: float = 60.0,
    ) -> None:
        super().__init__(flush, interval, least_pages, thorough_interval)

    def on_stop(self) -> None:
        for _ in range(3):
            self.flush(0)


class CleanService(ServiceThread):
    """Disk checks and file expiry; first run after ``first_delay`` seconds."""

    name = "cleaner"

    def __init__(
        self, clean: Callable[[], object], interval: float = 10.0, first_delay: float = 60.0
    ) -> None:
        super().__init__(interval)
        self.clean = clean
        self._first_run_at = time.monotonic() + first_delay

    def run_once(self) -> None:
        if time.monotonic() < self._first_run_at:
            return
        self.clean()


class DiskWatchService(ServiceThread):
    """Samples disk use often; over the clean-forcibly ratio, cleans at once (at most once
    per ``clean_interval``)."""

    name = "disk-watch"

    def __init__(
        self,
        check: Callable[[], float],
        forcibly: Callable[[float], bool],
        clean: Callable[[], object],
        interval: float = 0.2,
        clean_interval: float = 10.0,
    ) -> None:
        super().__init__(interval)
        self.check = check
        self.forcibly = forcibly
        self.clean = clean
        self.clean_interval = clean_interval
        self._next_clean = 0.0

    def run_once(self) -> None:
        ratio = self.check()
        now = time.monotonic()
        if self.forcibly(ratio) and now >= self._next_clean:
            self._next_clean = now + self.clean_interval
            self.clean()


def build_services(
    config: StoreConfig,
    flush_commit_log: Flush,
    flushed_offset: Offset,
    max_offset: Offset,
    flush_consume_queues: Flush,
    clean: Callable[[], object],
    disk_watch: DiskWatchService | None = None,
) -> tuple[list[ServiceThread], GroupCommitService | None]:
    """The store's threads as ``config`` asks (not started), and the group commit if any."""
    group_commit = None
    if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
        group_commit = GroupCommitService(flush_commit_log, flushed_offset, max_offset)
        commit_log_service: ServiceThread = group_commit
    else:
        commit_log_service = CommitLogFlusher(
            flush_commit_log,
            flushed_offset,
            config.flush_interval_commit_log_ms / 1000,
            config.flush_commit_log_least_pages,
            config.flush_commit_log_thorough_interval_ms / 1000,
        )
    services = [
        commit_log_service,
        ConsumeQueueFlusher(
            flush_consume_queues,
            config.flush_interval_consume_queue_ms / 1000,
            config.flush_consume_queue_least_pages,
            config.flush_consume_queue_thorough_interval_ms / 1000,
        ),
        CleanService(
            clean, config.clean_resource_interval_ms / 1000, config.clean_first_delay_ms / 1000
        ),
    ]
    if disk_watch is not None:
        services.append(disk_watch)
    return services, group_commit

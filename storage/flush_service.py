"""Background services of the store: flushers, group commit and the file cleaner.

Each runs on its own daemon thread so that the owner (the event loop) never waits for a
disk. Flushes use ``fdatasync``, which releases the GIL.

- ``CommitLogFlusher`` (ASYNC_FLUSH): every 500 ms forces the CommitLog when at least 4
  pages are dirty, and fully at least every 10 s.
- ``GroupCommitService`` (SYNC_FLUSH): puts register the offset they need on disk; one
  flush serves every request that arrived while the previous one ran.
- ``ConsumeQueueFlusher``: every second, 2 pages; fully every 60 s, then the checkpoint.
- ``CleanService``: every 10 s checks disk use and deletes expired files.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.message_store import MessageStore


class ServiceThread:
    """A named daemon thread that runs ``run_once`` every ``interval`` seconds or on wake-up."""

    name = "service"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

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
            self.run_once()
        self.on_stop()

    def run_once(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def on_stop(self) -> None:
        """Work left for shutdown (a last flush)."""


class PeriodicFlusher(ServiceThread):
    """Every ``interval``: flush when ``least_pages`` are dirty; fully every ``thorough``."""

    def __init__(
        self, store: MessageStore, interval: float, least_pages: int, thorough_interval: float
    ) -> None:
        super().__init__(interval)
        self.store = store
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

    def flush(self, least_pages: int) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class CommitLogFlusher(PeriodicFlusher):
    """ASYNC_FLUSH: acknowledged after the page-cache write; forced here in the background."""

    name = "commitlog-flusher"

    def __init__(
        self,
        store: MessageStore,
        interval: float = 0.5,
        least_pages: int = 4,
        thorough_interval: float = 10.0,
    ) -> None:
        super().__init__(store, interval, least_pages, thorough_interval)

    def flush(self, least_pages: int) -> None:
        self.store.flush_commit_log(least_pages)

    def on_stop(self) -> None:
        for _ in range(10):
            before = self.store.commit_log.flushed_where
            self.store.flush_commit_log(0)
            if self.store.commit_log.flushed_where == before:
                break


@dataclass(slots=True)
class GroupCommitRequest:
    """A put waiting until ``next_offset`` is on disk."""

    next_offset: int
    on_done: Callable[[], None]


class GroupCommitService(ServiceThread):
    """SYNC_FLUSH: many waiting puts share one flush."""

    name = "group-commit"

    def __init__(self, store: MessageStore, interval: float = 0.01) -> None:
        super().__init__(interval)
        self.store = store
        self._lock = threading.Lock()
        self._requests: list[GroupCommitRequest] = []

    def submit(self, next_offset: int, on_done: Callable[[], None]) -> None:
        """Call ``on_done`` (on this service's thread) once ``next_offset`` is flushed."""
        if self.store.commit_log.flushed_where >= next_offset:
            on_done()
            return
        with self._lock:
            self._requests.append(GroupCommitRequest(next_offset, on_done))
        self.wakeup()

    def run_once(self) -> None:
        with self._lock:
            requests, self._requests = self._requests, []
        # Flush everything written so far, not just what was asked for: puts that arrived
        # during the previous flush are served by this one.
        target = self.store.commit_log.max_offset
        if requests:
            target = max(target, max(r.next_offset for r in requests))
        self._flush_until(target)
        flushed = self.store.commit_log.flushed_where
        waiting = []
        for request in requests:
            if flushed >= request.next_offset:
                request.on_done()
            else:
                waiting.append(request)
        if waiting:
            with self._lock:
                self._requests[:0] = waiting

    def _flush_until(self, offset: int) -> None:
        # A request may span a file roll: one flush(0) call handles one file.
        for _ in range(4):
            if self.store.commit_log.flushed_where >= offset:
                return
            before = self.store.commit_log.flushed_where
            self.store.flush_commit_log(0)
            if self.store.commit_log.flushed_where == before:
                return

    def on_stop(self) -> None:
        self._flush_until(self.store.commit_log.max_offset)
        self.run_once()


class ConsumeQueueFlusher(PeriodicFlusher):
    """Forces ConsumeQueue pages; the thorough flush also writes the checkpoint."""

    name = "consumequeue-flusher"

    def __init__(
        self,
        store: MessageStore,
        interval: float = 1.0,
        least_pages: int = 2,
        thorough_interval: float = 60.0,
    ) -> None:
        super().__init__(store, interval, least_pages, thorough_interval)

    def flush(self, least_pages: int) -> None:
        self.store.flush_consume_queues(least_pages)

    def on_stop(self) -> None:
        for _ in range(3):
            self.store.flush_consume_queues(0)


class CleanService(ServiceThread):
    """Disk checks and file expiry; first run after ``first_delay`` seconds."""

    name = "cleaner"

    def __init__(
        self, store: MessageStore, interval: float = 10.0, first_delay: float = 60.0
    ) -> None:
        super().__init__(interval)
        self.store = store
        self._first_run_at = time.monotonic() + first_delay

    def run_once(self) -> None:
        if time.monotonic() < self._first_run_at:
            return
        self.store.clean_once()

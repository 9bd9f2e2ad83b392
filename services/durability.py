"""Durability: let puts await their flush without blocking the event loop.

With SYNC_FLUSH a put is acknowledged only once its bytes are on disk, and only then
dispatched (made visible to pulls). A waiter wakes the store's group commit
(``wake_flush``), which flushes everything written so far; each advance of the store's
``flushed_offset`` reaches the loop as one callback (``flush_listeners``), which dispatches
what is now durable (``dispatch_pending``) and resolves every waiter at or below it. A put
that is not flushed within ``sync_flush_timeout`` is answered False (the message stays
stored and is dispatched once flushed). :class:`services.appender.Appender` is the caller.

After a failed fsync the flushed offset never moves again: every waiter, and every later
``wait``, gets :class:`~storage.StoreFlushFailedError` at once instead of a timeout. The flush
callback never raises: a dispatch error is the store's to flag (it refuses writes and retries),
and an unexpected one is logged once while the waiters are still answered.

With ASYNC_FLUSH ``wait`` returns at once: the background flusher forces pages later.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time

from storage import FlushDiskType, MessageStore, StoreFlushFailedError

log = logging.getLogger(__name__)

_SWEEP_INTERVAL = 0.1


class DurabilityTracker:
    """Loop-side registry of puts waiting for the group commit."""

    def __init__(self, store: MessageStore, timeout: float | None = None) -> None:
        self.store = store
        self.sync = store.config.flush_disk_type is FlushDiskType.SYNC_FLUSH
        self.timeout = timeout if timeout is not None else store.config.sync_flush_timeout_ms / 1000
        self._waiting: collections.deque[tuple[int, float, asyncio.Future[bool]]] = (
            collections.deque()
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._dispatch_error = ""  # the last unexpected dispatch error logged

    def start(self) -> None:
        """Hook into the store's flush notifications; call on the event loop."""
        self._loop = asyncio.get_running_loop()
        if self.sync:
            self.store.flush_listeners.append(self._flushed_from_thread)

    def stop(self) -> None:
        """Answer every waiter (the store's final flush has run by now)."""
        if self._flushed_from_thread in self.store.flush_listeners:
            self.store.flush_listeners.remove(self._flushed_from_thread)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        self._on_flushed(self.store.flushed_offset)
        while self._waiting:
            _, _, future = self._waiting.popleft()
            if not future.done():
                future.set_result(False)

    async def wait(self, end_offset: int) -> bool:
        """True once ``end_offset`` is on disk; False after the flush timeout."""
        if not self.sync:
            return True
        if self.store.flushed_offset >= end_offset and not self._waiting:
            self._dispatch(end_offset)
            return True
        if self.store.flush_failed:
            raise self._flush_failed()
        loop = self._loop or asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        self._waiting.append((end_offset, time.monotonic() + self.timeout, future))
        self.store.wake_flush()
        self._arm_sweeper(loop)
        return await future

    def _flushed_from_thread(self, flushed: int) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._on_flushed, flushed)

    def _on_flushed(self, flushed: int) -> None:
        """On the loop: dispatch what is durable, then wake its waiters."""
        self._dispatch(flushed)
        waiting = self._waiting
        while waiting and waiting[0][0] <= flushed:
            future = waiting.popleft()[2]
            if not future.done():
                future.set_result(True)

    def _dispatch(self, flushed: int) -> None:
        """Dispatch what is durable; never raises (a callback that raised would be retried
        by nothing and leave its waiters hanging)."""
        try:
            self.store.dispatch_pending(flushed)
        except Exception as exc:
            if str(exc) != self._dispatch_error:
                self._dispatch_error = str(exc)
                log.exception("dispatch after a flush failed")
            self.store.mark_not_writeable(f"dispatch failed: {exc}")

    def _flush_failed(self) -> StoreFlushFailedError:
        return StoreFlushFailedError(
            f"not acknowledged: {self.store.not_writeable_reason}; the message may or may not "
            "be on disk"
        )

    def _arm_sweeper(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._sweeper is None:
            self._sweeper = loop.call_later(_SWEEP_INTERVAL, self._sweep)

    def _sweep(self) -> None:
        """Answer waiters whose deadline passed; they stay stored and dispatch later."""
        self._sweeper = None
        now = time.monotonic()
        failed = self.store.flush_failed
        for _, deadline, future in self._waiting:
            if future.done():
                continue
            if failed:
                future.set_exception(self._flush_failed())
            elif deadline <= now:
                future.set_result(False)
        while self._waiting and self._waiting[0][2].done():
            self._waiting.popleft()
        if self._waiting and self._loop is not None:
            self._arm_sweeper(self._loop)

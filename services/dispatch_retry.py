"""DispatchRetry: dispatch again from where it stopped, without waiting for the next put.

A ConsumeQueue or index file that could not be written (no space, an I/O error) stops
dispatch at that record and makes the store refuse writes (``Refusal.DISPATCH``): nothing more
is acknowledged that no consumer could see. Every ``interval`` this task, on the event loop
(the store's owner thread), asks the store to dispatch again from that record
(:meth:`storage.MessageStore.retry_dispatch`); once it has caught up, waiting long-polls are
woken and writes are accepted again. A retry that raises is logged once, never in a loop.
"""

from __future__ import annotations

import logging
import time

from services.background import BackgroundLoop
from storage import MessageStore

log = logging.getLogger(__name__)


class DispatchRetry:
    """The loop task that retries a stalled dispatch."""

    def __init__(self, store: MessageStore, interval: float = 0.2) -> None:
        self.store = store
        self.interval = interval
        self.stalled_since: float | None = None  # monotonic time dispatch stopped, if it did
        self._loop = BackgroundLoop("dispatch-retry", self._retry, interval)
        self._last_error = ""

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    async def _retry(self) -> None:
        self.retry_once()

    def retry_once(self) -> bool:
        """One attempt (on the loop); True when dispatch is not stalled afterwards."""
        store = self.store
        if not store.dispatch_stalled:
            self.stalled_since = None
            return True
        if self.stalled_since is None:
            self.stalled_since = time.monotonic()
        try:
            caught_up = store.retry_dispatch()
        except Exception as exc:
            if str(exc) != self._last_error:
                self._last_error = str(exc)
                log.exception("retrying dispatch failed")
            return False
        if caught_up:
            log.info(
                "dispatch caught up after %.1f s stalled",
                time.monotonic() - self.stalled_since,
            )
            self.stalled_since = None
        return caught_up

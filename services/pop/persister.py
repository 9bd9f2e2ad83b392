"""Writes ``config/popState.json`` every few seconds when the POP state changed, and at stop.

The snapshot is taken on the event loop thread (one consistent instant of the in-flight table)
and written in a worker thread. A stale snapshot is safe: restart reads more of the revive log.
"""

from __future__ import annotations

import asyncio
import logging

from services.background import BackgroundLoop
from services.pop.service import PopService
from services.pop.state_file import PopSnapshot

log = logging.getLogger(__name__)


class PopStatePersister:
    def __init__(self, pop: PopService, interval_s: float = 5.0) -> None:
        self._pop = pop
        self._loop = BackgroundLoop("pop-state-persister", self.persist, interval_s)
        self._last: PopSnapshot | None = None
        self.failures = 0

    def start(self) -> None:
        self._loop.start()

    async def persist(self) -> None:
        snapshot = self._pop.snapshot()
        if snapshot == self._last:
            return
        try:
            await asyncio.to_thread(self._pop.persist, snapshot)
            self._last = snapshot
        except OSError:
            self.failures += 1
            log.exception("could not persist the POP state; will retry")

    async def stop(self) -> None:
        await self._loop.stop()
        await self.persist()

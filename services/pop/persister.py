"""Writes ``config/popState.json`` every few seconds when the POP state changed, and at stop.

The snapshot is taken on the event loop thread (one consistent instant of the in-flight table)
and written in a worker thread. A stale snapshot is safe: restart reads more of the revive log.
"""

from __future__ import annotations

import asyncio
import logging

from services.pop.service import PopService
from services.pop.state_file import PopSnapshot

log = logging.getLogger(__name__)


class PopStatePersister:
    def __init__(self, pop: PopService, interval_s: float = 5.0) -> None:
        self._pop = pop
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self._last: PopSnapshot | None = None
        self.failures = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="pop-state-persister")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            await self.persist()

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
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.persist()

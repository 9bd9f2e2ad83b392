"""SYNC_MASTER: a put is answered once every in-sync slave has it (GroupTransferService).

``wait(end_offset)`` answers PUT_OK once every slave of the sync-state set (at least one,
at least ``min_slaves``) acked ``end_offset``; FLUSH_SLAVE_TIMEOUT after the timeout;
SLAVE_NOT_AVAILABLE at once when no slave is in sync and none is required. Either way the
message is stored on the master, as RocketMQ's SendStatus says. A set that shrinks below what
a waiter needs never answers it PUT_OK: the waiter waits on (a slave that catches up again
acks it) until its timeout. Waiters are woken by the HA service's ack listeners, not by
polling.
"""

from __future__ import annotations

import asyncio
import collections

from services.ha.master import HAService
from storage import PutStatus


class GroupTransferService:
    """Loop-side registry of puts waiting for the in-sync slaves."""

    def __init__(self, ha: HAService, timeout_s: float, min_slaves: int = 0) -> None:
        self._ha = ha
        self._timeout_s = timeout_s
        self._min_slaves = min_slaves  # min_in_sync_replicas - 1: the master counts itself
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()
        ha.ack_listeners.append(self._on_progress)

    async def wait(self, end_offset: int) -> PutStatus:
        if not self._ha.sync_state_set and not self._min_slaves:
            return PutStatus.SLAVE_NOT_AVAILABLE
        if self._confirmed_offset() >= end_offset:
            return PutStatus.PUT_OK
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((end_offset, future))
        try:
            await asyncio.wait_for(future, self._timeout_s)
        except TimeoutError:
            return PutStatus.FLUSH_SLAVE_TIMEOUT
        return PutStatus.PUT_OK

    def _on_progress(self) -> None:
        """An ack or a change of the set: answer the waiters now covered."""
        confirmed = self._confirmed_offset()
        if confirmed < 0:
            return  # too few in sync: the waiters time out, or hear of a slave back in sync
        waiting = self._waiting
        while waiting and (waiting[0][0] <= confirmed or waiting[0][1].done()):
            future = waiting.popleft()[1]
            if not future.done():
                future.set_result(None)

    def _confirmed_offset(self) -> int:
        """What every in-sync slave acked; -1 while fewer than one (or ``min_slaves``) are."""
        ha = self._ha
        if len(ha.sync_state_set) < max(1, self._min_slaves):
            return -1
        return ha.confirmed_offset()

    def close(self) -> None:
        if self._on_progress in self._ha.ack_listeners:
            self._ha.ack_listeners.remove(self._on_progress)
        while self._waiting:
            future = self._waiting.popleft()[1]
            if not future.done():
                future.cancel()

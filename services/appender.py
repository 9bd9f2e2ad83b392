"""The one path of a durable put: append to the store, then wait until the append is durable.

Send, send-back, DLQ redrive and delayed delivery all put through :meth:`Appender.put` (the
broker hands it to them as a :data:`PutMessages`). One message is appended alone, a batch
atomically; with SYNC_FLUSH the caller then waits for the group commit, and a flush slower
than ``sync_flush_timeout_ms`` answers FLUSH_DISK_TIMEOUT (stored; visible once flushed).
With ASYNC_FLUSH the put returns as soon as the bytes are in the page cache.

On a master with slaves a :class:`ReplicationHook` hears of every append (to wake the HA
connections) and, after the flush wait, confirms the put: with sync replication it waits for
the in-sync slaves (FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE when they cannot).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Protocol

from services.durability import DurabilityTracker
from storage import BatchPut, Message, MessageStore, PutResult, PutStatus

PutMessages = Callable[[list[Message]], Awaitable[list[PutResult]]]
"""Appends one message (a list of one) or one atomic batch and waits until it is durable."""
PutBodies = Callable[[Message, list[bytes], list[str]], Awaitable[tuple[BatchPut, PutStatus]]]
"""Appends a batch of bodies alone (:meth:`Appender.put_bodies`)."""


class ReplicationHook(Protocol):
    """What the put path tells replication (see :mod:`services.ha`)."""

    def appended(self, end_offset: int, store_timestamp: int) -> None:
        """Bytes up to ``end_offset`` are in the CommitLog (wake the HA connections)."""

    async def confirm(self, end_offset: int) -> PutStatus:
        """PUT_OK once replicated as the mode requires, else the status to answer."""


class Appender:
    """Appends to the store and waits for durability through its tracker."""

    def __init__(
        self,
        store: MessageStore,
        durability: DurabilityTracker,
        replication: ReplicationHook | None = None,
    ) -> None:
        self._store = store
        self._durability = durability
        self.replication = replication  # set while this broker is a master with an HA port

    async def put(self, messages: list[Message]) -> list[PutResult]:
        """Append one message or one atomic batch, then wait until it is durable."""
        return await self.settle(self.append(messages))

    def append(self, messages: list[Message]) -> list[PutResult]:
        """Append one message or one atomic batch (no await: the caller's check before it
        and its bookkeeping after it happen with nothing else in between)."""
        store = self._store
        if len(messages) == 1:
            results = [store.put_message(messages[0])]
        else:
            results = store.put_messages(messages)
        if results and self.replication is not None:
            self.replication.appended(results[-1].end_offset, results[-1].store_timestamp)
        return results

    async def put_bodies(
        self, first: Message, bodies: list[bytes], uniq_keys: list[str]
    ) -> tuple[BatchPut, PutStatus]:
        """:meth:`put` of a batch of bodies alone (see :meth:`MessageStore.put_bodies`),
        answered as columns and the one status of the batch."""
        put = self.append_bodies(first, bodies, uniq_keys, None)
        return put, await self.durable_status(put.end_offset)

    def append_bodies(
        self, first: Message, bodies: list[bytes], uniq_keys: list[str], crcs: list[int] | None
    ) -> BatchPut:
        """:meth:`append` of a batch of bodies alone, answered as columns (no await, as
        :meth:`append`); ``crcs``: the bodies' BODYCRCs, if made already."""
        put = self._store.put_bodies(first, bodies, uniq_keys, crcs)
        if self.replication is not None:
            self.replication.appended(put.end_offset, put.store_timestamp)
        return put

    async def settle(self, results: list[PutResult]) -> list[PutResult]:
        """Wait until appended ``results`` are durable; their status says how that went."""
        if not results:
            return results
        end = results[-1].end_offset
        if not await self._durability.wait(end):
            status = PutStatus.FLUSH_DISK_TIMEOUT
        elif self.replication is None:
            return results
        else:
            status = await self.replication.confirm(end)
            if status is PutStatus.PUT_OK:
                return results
        return [dataclasses.replace(r, status=status) for r in results]

    async def durable_status(self, end_offset: int) -> PutStatus:
        """PUT_OK once the CommitLog up to ``end_offset`` is flushed (SYNC_FLUSH) and
        replicated (sync replication), else the status to answer: what a repeated put
        answers (:meth:`settle` does the same inline, one await less on every put)."""
        if not await self._durability.wait(end_offset):
            return PutStatus.FLUSH_DISK_TIMEOUT
        replication = self.replication
        return PutStatus.PUT_OK if replication is None else await replication.confirm(end_offset)

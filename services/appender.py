"""The one path of a durable put: append to the store, then wait until the append is durable.

Send, send-back, DLQ redrive, delayed delivery, timers, transactions and POP bookkeeping all
put through :meth:`Appender.put` (the broker hands it to them as a :data:`PutMessages`): one
message, or one atomic batch. With SYNC_FLUSH the put then waits for the group commit, and a
flush slower than ``sync_flush_timeout_ms`` answers FLUSH_DISK_TIMEOUT (stored; visible once
flushed). With ASYNC_FLUSH the put returns as soon as the bytes are in the page cache. Where
nothing may run between a check and the append (a keyed put), the two halves are called
apart: :meth:`Appender.append`, then :meth:`Appender.wait_durable`.

On a master with slaves a :class:`ReplicationHook` admits every append first (a master with
fewer in-sync replicas than ``min_in_sync_replicas`` refuses it: nothing is stored), hears of
it (to wake the HA connections) and, after the flush wait, confirms the put: with sync
replication it waits for the in-sync slaves (FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE when
they cannot).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from services.durability import DurabilityTracker
from storage import Appended, Message, MessageStore, PutStatus

PutMessages = Callable[[Sequence[Message]], Awaitable[Appended]]
"""Appends one message (a sequence of one) or one atomic batch and waits until it is durable."""


class ReplicationHook(Protocol):
    """What the put path tells replication (see :mod:`services.ha`)."""

    def admit(self) -> None:
        """Before an append: raise a :class:`~storage.StorageError` to refuse it (too few
        replicas in sync), so that nothing is stored."""

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

    async def put(self, messages: Sequence[Message]) -> Appended:
        """Append one message or one atomic batch, then wait until it is durable: the put's
        status says how that went."""
        appended = self.append(messages)
        appended.status = await self.wait_durable(appended.end_offset)
        return appended

    def append(self, messages: Sequence[Message]) -> Appended:
        """The first half of :meth:`put` (no await: the caller's check before it and its
        bookkeeping after it happen with nothing else in between)."""
        replication = self.replication
        if replication is not None:
            replication.admit()
        appended = self._store.put(messages)
        if replication is not None and appended.offsets:
            replication.appended(appended.end_offset, appended.store_timestamp)
        return appended

    async def wait_durable(self, end_offset: int) -> PutStatus:
        """The second half of :meth:`put`: PUT_OK once the CommitLog up to ``end_offset`` is
        flushed (SYNC_FLUSH) and replicated (sync replication), else the status to answer."""
        if not await self._durability.wait(end_offset):
            return PutStatus.FLUSH_DISK_TIMEOUT
        replication = self.replication
        return PutStatus.PUT_OK if replication is None else await replication.confirm(end_offset)

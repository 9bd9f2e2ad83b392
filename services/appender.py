"""The one path of a durable put: append to the store, then wait until the append is durable.

Send, send-back, DLQ redrive and delayed delivery all put through :meth:`Appender.put` (the
broker hands it to them as a :data:`PutMessages`). One message is appended alone, a batch
atomically; with SYNC_FLUSH the caller then waits for the group commit, and a flush slower
than ``sync_flush_timeout_ms`` answers FLUSH_DISK_TIMEOUT (stored; visible once flushed).
With ASYNC_FLUSH the put returns as soon as the bytes are in the page cache.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from services.durability import DurabilityTracker
from storage import Message, MessageStore, PutResult, PutStatus

PutMessages = Callable[[list[Message]], Awaitable[list[PutResult]]]
"""Appends one message (a list of one) or one atomic batch and waits until it is durable."""


class Appender:
    """Appends to the store and waits for durability through its tracker."""

    def __init__(self, store: MessageStore, durability: DurabilityTracker) -> None:
        self._store = store
        self._durability = durability

    async def put(self, messages: list[Message]) -> list[PutResult]:
        """Append one message or one atomic batch, then wait until it is durable."""
        store = self._store
        if len(messages) == 1:
            results = [store.put_message(messages[0])]
        else:
            results = store.put_messages(messages)
        if not results or await self._durability.wait(max(r.end_offset for r in results)):
            return results
        return [dataclasses.replace(r, status=PutStatus.FLUSH_DISK_TIMEOUT) for r in results]

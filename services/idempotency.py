"""Idempotent produce: a send repeated with the same key inside the window is stored once.

The rules (the IETF httpapi ``Idempotency-Key`` draft's, with SQS's five-minute window):

- A key is 1 to 128 printable ASCII characters (``!`` to ``~``), scoped to one topic.
- The first send with a key is stored; its first record carries the key, the fingerprint of
  its payload and, for a batch, how many records it holds (reserved properties).
- A repeat inside the window (by store time) with the same fingerprint is answered with the
  original records -- nothing is appended -- once they are as durable as the mode requires.
  A repeat with another fingerprint is :class:`IdempotencyKeyReusedError`.
- A repeat that arrives while the first is still waiting for its flush or its slaves finds
  the first in memory and waits for the same durability: it answers the same receipt.

The CommitLog is the truth. A key is found through the index (dispatch indexes it, recovery
and slaves rebuild it from the log) plus a table of this broker's own keyed appends that the
index does not hold yet (SYNC_FLUSH dispatches only after the flush; a flush timeout answers
before it). The table keeps an append until the index covers it, so the two together never
miss one. The check and the append run with no ``await`` in between: on the one event loop,
two concurrent repeats cannot both append.

A broker decides "new" only once its index covers everything it did not write itself: after
an unclean exit the index catches up in the background, and a promoted slave's index must
cover what it replicated; until then keyed puts wait (:meth:`IdempotencyService.ready`).

Internal re-puts (send-back, redrive, delayed delivery, POP revive) go through
:meth:`IdempotencyService.reput` with a key derived from the record they copy
(:func:`repost_key`), so a crash between a re-put and the step that records it done makes
the next attempt find the copy instead of storing another.

Outside the window a key is new again, and retention may delete what a key points at
earlier: beyond the window, deduplication is best effort.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NamedTuple, Protocol

from services.errors import (
    IdempotencyKeyReusedError,
    IdempotencyUnavailableError,
    InvalidIdempotencyKeyError,
    KeyIndexCatchingUpError,
)
from storage import (
    Appended,
    Message,
    MessageStore,
    PutResult,
    PutStatus,
    StorageError,
    StoredMessage,
)
from storage.index_service import idempotency_scope
from storage.record.properties import (
    IDEMPOTENCY_PROPERTIES,
    PROPERTY_IDEMPOTENCY_BATCH,
    PROPERTY_IDEMPOTENCY_FINGERPRINT,
    PROPERTY_IDEMPOTENCY_KEY,
)

if TYPE_CHECKING:
    from services.send_payload import Fingerprint

MAX_KEY_LENGTH: Final = 128
KEY_PATTERN: Final = r"^[!-~]{1,128}$"
"""Printable ASCII without spaces, as SQS's MessageDeduplicationId."""
_KEY: Final = re.compile(KEY_PATTERN[1:-1])
DEFAULT_WINDOW_S: Final = 300
READY_WAIT_S: Final = 10.0
"""How long a client's keyed send waits for the key index to catch up before it is refused
(503, nothing written); internal re-puts wait as long as it takes."""
CATCH_UP_SLICE: Final = 5000
"""Records indexed per step of the background catch-up (the loop serves between steps)."""

Clock = Callable[[], float]


def check_key(key: str) -> str:
    """``key`` when it is 1 to 128 printable ASCII characters, else InvalidIdempotencyKeyError."""
    if _KEY.fullmatch(key) is None:
        shown = f"{key[:40]!r}{'...' if len(key) > 40 else ''}"
        raise InvalidIdempotencyKeyError(
            f"an idempotency key is 1 to {MAX_KEY_LENGTH} printable ASCII characters "
            f"('!' to '~', no spaces); got {shown} ({len(key)} characters)"
        )
    return key


def repost_key(source: StoredMessage) -> str:
    """The key of a re-put of ``source``: its physical offset, the same on every replica of
    the group. It holds a space, so no client's key is ever equal to it."""
    return repost_key_at(source.physical_offset)


def repost_key_at(physical_offset: int) -> str:
    """:func:`repost_key` of the record at ``physical_offset``."""
    return f"re-put {physical_offset}"


class Appends(Protocol):
    """The two halves of a durable put (:class:`services.appender.Appender`)."""

    def append(self, messages: Sequence[Message]) -> Appended: ...

    async def wait_durable(self, end_offset: int) -> PutStatus: ...


@dataclass(slots=True)  # not frozen: a frozen init sets each field through object.__setattr__
class Written:
    """What a keyed put did: its results, and the earlier records when it repeated a put."""

    results: Sequence[PutResult]
    earlier: list[StoredMessage] | None = None

    @property
    def replayed(self) -> bool:
        return self.earlier is not None


RePut = Callable[[Message, StoredMessage], Awaitable[Written]]
"""Puts a copy of a stored record once (:meth:`IdempotencyService.reput`)."""


class _Unindexed(NamedTuple):
    """A keyed append of this broker that the index may not hold yet."""

    topic: str
    key: str
    fingerprint: str | None
    first_offset: int
    records: int
    end_offset: int
    store_timestamp: int


class IdempotencyService:
    """Finds earlier sends by key and appends new ones, atomically on the event loop."""

    def __init__(
        self,
        store: MessageStore,
        appends: Appends,
        window_s: float = DEFAULT_WINDOW_S,
        clock: Clock = time.time,
    ) -> None:
        self._store = store
        self._appends = appends
        self.window_ms = int(window_s * 1000)
        self._clock = clock
        self._unindexed: dict[tuple[str, str], _Unindexed] = {}
        self._order: deque[_Unindexed] = deque()
        self._ready_at = store.dispatched_offset
        self._index_progress = asyncio.Event()

    # ------------------------------------------------------------------ readiness

    def begin_writing(self) -> None:
        """This broker starts taking writes (a promoted slave): keys are new only once the
        index covers everything dispatched so far, i.e. everything it replicated."""
        self._ready_at = self._store.dispatched_offset
        self._index_progress.set()

    @property
    def ready_now(self) -> bool:
        return self._store.keyed.covers(self._ready_at)

    async def ready(self, timeout_s: float | None = READY_WAIT_S) -> None:
        """Return once the index covers what this broker did not write itself (at once,
        without yielding, when it does); KeyIndexCatchingUpError after ``timeout_s``."""
        if self._store.keyed.covers(self._ready_at):
            return
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self._store.keyed.covers(self._ready_at):
            self._index_progress.clear()
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                await asyncio.wait_for(self._index_progress.wait(), remaining)
            except TimeoutError:
                if self._store.keyed.covers(self._ready_at):
                    return
                raise KeyIndexCatchingUpError(
                    "the key index is still being rebuilt after a restart; nothing was "
                    "written: retry with the same Idempotency-Key"
                ) from None

    async def catch_up_index(self) -> None:
        """Rebuild the index in slices (after an unclean exit), waking keyed puts that wait
        for it after each slice; the loop serves requests between slices."""
        store = self._store
        caught_up = False
        while not caught_up:
            caught_up = store.catch_up_index(max_records=CATCH_UP_SLICE)
            self._index_progress.set()
            await asyncio.sleep(0)

    # ------------------------------------------------------------------ puts

    async def put_once(
        self,
        topic: str,
        key: str,
        fingerprint: Fingerprint | None,
        messages: Sequence[Message],
        *,
        since_ms: int | None = None,
        ready_wait_s: float | None = READY_WAIT_S,
    ) -> Written:
        """Append ``messages`` (one, or an atomic batch) under ``key`` in ``topic``, or, when
        a put with that key was stored at ``since_ms`` or later (default: inside the
        window), answer that put's records with their durability now.

        ``fingerprint`` None: any earlier put with the key counts as this one (re-puts).
        """
        if self._store.keyed.covers(self._ready_at):  # = _earlier_put, one coroutine less
            since = self.since_ms() if since_ms is None else since_ms
            earlier = self.find(topic, key, fingerprint, since)
        else:
            earlier = await self._earlier_put(topic, key, fingerprint, since_ms, ready_wait_s)
        # From the look-up to the append nothing awaits: no other put runs in between.
        if earlier is not None:
            return await self._replay(earlier)
        stamp = None if fingerprint is None else fingerprint.value
        _stamp(messages[0].properties, key, stamp, len(messages))
        appended = self._appends.append(messages)
        end_offset = appended.end_offset
        self._remember(
            topic,
            key,
            stamp,
            appended.offsets[0],
            len(appended),
            end_offset,
            appended.store_timestamp,
        )
        appended.status = await self._appends.wait_durable(end_offset)
        return Written(appended)

    async def _earlier_put(
        self,
        topic: str,
        key: str,
        fingerprint: Fingerprint | None,
        since_ms: int | None,
        ready_wait_s: float | None,
    ) -> list[StoredMessage] | None:
        """The records of the earlier put with ``key`` (:meth:`find`) once this broker may
        decide, or None. It awaits only while the index catches up, before the look-up: a
        caller that appends right after it has nothing run in between. (When the index
        covers what it must, the puts call :meth:`find` at once.)"""
        if not self._store.keyed.enabled:
            raise IdempotencyUnavailableError(
                "this broker runs without the message index: it cannot take an "
                "Idempotency-Key (enable message_index_enable)"
            )
        if not self._store.keyed.covers(self._ready_at):
            await self.ready(ready_wait_s)
        since = self.since_ms() if since_ms is None else since_ms
        return self.find(topic, key, fingerprint, since)

    async def _replay(self, earlier: list[StoredMessage]) -> Written:
        """The answer to a repeat: the earlier records with their durability now."""
        status = await self._appends.wait_durable(_end_offset(earlier[-1]))
        return Written([_put_result(r, status) for r in earlier], earlier)

    async def reput(
        self, message: Message, source: StoredMessage, *, since_ms: int | None = None
    ) -> Written:
        """Put ``message``, a copy of ``source`` (a retry, a dead letter, a redrive, a due
        delayed message), once: keyed by :func:`repost_key` in the message's topic."""
        properties = message.properties
        for name in IDEMPOTENCY_PROPERTIES:
            properties.pop(name, None)
        if not self._store.keyed.enabled:  # nothing finds keys: put as RocketMQ does
            return Written(await self._durable(self._appends.append([message])))
        return await self.put_once(
            message.topic, repost_key(source), None, [message], since_ms=since_ms, ready_wait_s=None
        )

    async def reput_all(
        self,
        items: Sequence[tuple[Message, StoredMessage]],
        *,
        fresh: bool = False,
        since_ms: int | None = None,
    ) -> list[PutResult | StorageError]:
        """:meth:`reput` for many copies (the timer wheel's due messages): every one is
        appended (or found put already) with nothing in between, then one wait until the
        last is durable. Each answer is its result, or the StorageError that refused it.

        ``fresh``: the caller knows no copy can have been put before (nothing is looked up);
        each copy still carries its key, so a repeat after a crash finds it. ``since_ms``:
        how far back an earlier copy is looked for (default: the dedup window)."""
        keyed = self._store.keyed.enabled
        if keyed and not fresh and not self._store.keyed.covers(self._ready_at):
            await self.ready(None)
        since = self.since_ms() if since_ms is None else since_ms
        answers: list[PutResult | StorageError] = []
        end = -1
        for message, source in items:
            properties = message.properties
            for name in IDEMPOTENCY_PROPERTIES:
                properties.pop(name, None)
            # A timer topic's copy (a roll) is keyed in its real topic, as a send is.
            scope = idempotency_scope(message.topic, properties)
            try:
                if keyed:
                    key = repost_key(source)
                    earlier = None if fresh else self.find(scope, key, None, since)
                    if earlier is not None:
                        answers.append(_put_result(earlier[0], PutStatus.PUT_OK))
                        end = max(end, _end_offset(earlier[-1]))
                        continue
                    _stamp(properties, key, None, 1)
                [result] = self._appends.append([message])
                if keyed and not fresh:
                    self._remember_one(scope, key, result)
            except StorageError as exc:
                answers.append(exc)
                continue
            answers.append(result)
            end = max(end, result.end_offset)
        if end >= 0:
            status = await self._appends.wait_durable(end)
            if status is not PutStatus.PUT_OK:
                answers = [
                    dataclasses.replace(a, status=status) if isinstance(a, PutResult) else a
                    for a in answers
                ]
        return answers

    async def reput_first(self, message: Message, source_offset: int) -> Appended:
        """Put ``message``, a copy of the record at ``source_offset``, keyed as :meth:`reput`
        keys it, without looking for an earlier copy: for a caller that knows none was ever
        put (it wrote the source itself in this process and has not re-put it yet). A later
        :meth:`reput` or :meth:`find_reput` finds this one."""
        properties = message.properties
        for name in IDEMPOTENCY_PROPERTIES:
            properties.pop(name, None)
        if not self._store.keyed.enabled:
            return await self._durable(self._appends.append([message]))
        self._forget_indexed(self.since_ms())
        key = repost_key_at(source_offset)
        _stamp(properties, key, None, 1)
        appended = self._appends.append([message])
        self._remember_one(message.topic, key, appended[0])
        return await self._durable(appended)

    async def _durable(self, appended: Appended) -> Appended:
        appended.status = await self._appends.wait_durable(appended.end_offset)
        return appended

    def find_reput(self, topic: str, source: StoredMessage, since_ms: int) -> StoredMessage | None:
        """The re-put of ``source`` into ``topic`` stored at ``since_ms`` or later, if any."""
        found = self.find(topic, repost_key(source), None, since_ms)
        return found[0] if found else None

    def since_ms(self) -> int:
        """The oldest store time inside the window."""
        return int(self._clock() * 1000) - self.window_ms

    # ------------------------------------------------------------------ look-up

    def find(
        self, topic: str, key: str, fingerprint: Fingerprint | None, since_ms: int
    ) -> list[StoredMessage] | None:
        """The records of the put with ``key`` in ``topic`` stored at ``since_ms`` or later,
        or None. IdempotencyKeyReusedError when its fingerprint does not match ``fingerprint``
        (None: any put with the key counts)."""
        if self._order:  # none is held when dispatch indexes in the append (ASYNC_FLUSH)
            self._forget_indexed(since_ms)
        store = self._store
        first: StoredMessage | None = None
        pending = self._unindexed.get((topic, key)) if self._unindexed else None
        if pending is not None and pending.store_timestamp >= since_ms:
            first = store.look_message_by_offset(pending.first_offset)
            stored_fingerprint, count = pending.fingerprint, pending.records
        if first is None:
            first = store.keyed.find(topic, key, since_ms)
            if first is None:
                return None
            stored_fingerprint = first.properties.get(PROPERTY_IDEMPOTENCY_FINGERPRINT)
            count = _batch_count(first)
        if fingerprint is not None and not fingerprint.matches(stored_fingerprint):
            raise IdempotencyKeyReusedError(
                f"Idempotency-Key {key!r} was used for another payload in topic {topic} "
                f"(message {first.msg_id}, stored at {first.store_timestamp}): a retry must "
                "repeat the request exactly; a new message needs a new key"
            )
        return store.keyed.read_from(first, count)

    def _remember_one(self, topic: str, key: str, result: PutResult) -> None:
        """:meth:`_remember` of a re-put (one record, no fingerprint)."""
        self._remember(
            topic, key, None, result.physical_offset, 1, result.end_offset, result.store_timestamp
        )

    def _remember(
        self,
        topic: str,
        key: str,
        fingerprint: str | None,
        first_offset: int,
        records: int,
        end_offset: int,
        store_timestamp: int,
    ) -> None:
        """Hold a keyed append until the index covers it (see :meth:`find`): not at all when
        it does already (ASYNC_FLUSH dispatches in the append), as :meth:`_forget_indexed`
        would drop it first thing in the next look-up."""
        if self._store.keyed.covers(end_offset):
            return
        entry = _Unindexed(
            topic, key, fingerprint, first_offset, records, end_offset, store_timestamp
        )
        self._unindexed[(topic, key)] = entry
        self._order.append(entry)

    def _forget_indexed(self, since_ms: int) -> None:
        """Drop appends the index now holds, and those older than the window."""
        order = self._order
        covers = self._store.keyed.covers
        while order and (covers(order[0].end_offset) or order[0].store_timestamp < since_ms):
            entry = order.popleft()
            name = (entry.topic, entry.key)
            if self._unindexed.get(name) is entry:
                del self._unindexed[name]

    @property
    def unindexed_count(self) -> int:
        """Keyed appends held in memory until the index covers them."""
        return len(self._order)


def _stamp(properties: dict[str, str], key: str, fingerprint: str | None, records: int) -> None:
    """Mark the first record of a keyed put of ``records`` records (the reserved properties
    :meth:`IdempotencyService.find` reads back)."""
    properties[PROPERTY_IDEMPOTENCY_KEY] = key
    if fingerprint is not None:
        properties[PROPERTY_IDEMPOTENCY_FINGERPRINT] = fingerprint
    if records > 1:
        properties[PROPERTY_IDEMPOTENCY_BATCH] = str(records)


def _batch_count(first: StoredMessage) -> int:
    count = first.properties.get(PROPERTY_IDEMPOTENCY_BATCH, "1")
    return int(count) if count.isdigit() and int(count) > 0 else 1


def _end_offset(record: StoredMessage) -> int:
    return record.physical_offset + record.size


def _put_result(record: StoredMessage, status: PutStatus) -> PutResult:
    return PutResult(
        record.msg_id,
        record.topic,
        record.queue_id,
        record.queue_offset,
        record.physical_offset,
        record.size,
        record.store_timestamp,
        status,
    )

"""Long-polling: parked pulls wait on futures keyed by (topic, queue id).

RocketMQ's PullRequestHoldService re-checks parked pulls every 5 s and on each arrival; here a
pull that finds nothing parks one future under every key it reads, dispatch of a new message
notifies its key at once, and the puller re-reads and re-waits for the *remaining* time only.

Rules (style rule 6):

* a waiter is registered synchronously before the first ``await``, so a message dispatched
  on the event loop between "read found nothing" and "park" cannot be missed;
* notify is idempotent (``if not future.done()``) and skips waiters whose tag filter cannot
  match the new message's tags code — except on keys the waiter reads unfiltered (a group's
  retry queues: retries are delivered whatever their tag);
* a queue that becomes readable again without an arrival (a FIFO queue no longer held, a
  group's position reset) wakes every waiter on it, whatever its filter
  (:meth:`WaiterRegistry.wake_queue`): what is there now was never notified;
* every waiter removes itself in ``finally`` — woken, timed out, cancelled or abandoned by a
  disconnected client — so the registry never holds a dead waiter;
* the number of parked pulls is capped (:class:`~services.errors.TooManyWaitersError`);
* :meth:`WaiterRegistry.close` wakes every waiter for shutdown and refuses new ones.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from enum import Enum
from typing import Any

from services.errors import TooManyWaitersError
from storage import TagFilter

Key = tuple[str, int]
"""(topic, queue id)"""


class WakeReason(Enum):
    """Why a parked pull stopped waiting."""

    ARRIVED = "arrived"  # a matching message was dispatched to one of its queues
    TIMEOUT = "timeout"  # the remaining wait ran out
    SHUTDOWN = "shutdown"  # the broker is stopping
    ABANDONED = "abandoned"  # the caller's abandon signal fired (client disconnected)


class _Waiter:
    """One parked pull: its future, the tag filter a wake-up must match, and the keys where
    any arrival wakes it."""

    __slots__ = ("future", "tag_filter", "unfiltered")

    def __init__(
        self,
        future: asyncio.Future[WakeReason],
        tag_filter: TagFilter | None,
        unfiltered: frozenset[Key],
    ) -> None:
        self.future = future
        self.tag_filter = tag_filter
        self.unfiltered = unfiltered

    def accepts(self, key: Key, tags_code: int) -> bool:
        """Whether an arrival with ``tags_code`` on ``key`` may be what this pull waits for."""
        tag_filter = self.tag_filter
        return tag_filter is None or key in self.unfiltered or tag_filter.matches_code(tags_code)

    def wake(self, reason: WakeReason) -> None:
        if not self.future.done():
            self.future.set_result(reason)


class WaiterRegistry:
    """Parked pulls by (topic, queue id), with a cap and a shutdown switch."""

    def __init__(self, max_parked: int, retry_after_s: int = 1) -> None:
        if max_parked < 0:
            raise ValueError(f"max_parked must be >= 0, not {max_parked}")
        self.max_parked = max_parked
        self.retry_after_s = retry_after_s
        self._by_key: dict[Key, set[_Waiter]] = {}
        self._parked = 0
        self._closed = False
        self.rejected = 0  # pulls refused because the cap was reached
        self.woken = 0  # waiters woken by an arrival (or a queue readable again)

    @property
    def parked(self) -> int:
        """How many pulls are parked right now."""
        return self._parked

    def notify(self, topic: str, queue_id: int, tags_code: int) -> None:
        """A message with ``tags_code`` was dispatched to (topic, queue_id): wake its waiters."""
        key = (topic, queue_id)
        waiters = self._by_key.get(key)
        if not waiters:
            return
        for waiter in waiters:
            if not waiter.future.done() and waiter.accepts(key, tags_code):
                waiter.wake(WakeReason.ARRIVED)
                self.woken += 1

    def wake_queue(self, topic: str, queue_id: int) -> None:
        """(topic, queue_id) can be read again with nothing dispatched to it: wake all of its
        waiters, whatever their tag filter; each reads again and re-parks if nothing is
        there for it."""
        for waiter in self._by_key.get((topic, queue_id), ()):
            if not waiter.future.done():
                waiter.wake(WakeReason.ARRIVED)
                self.woken += 1

    def close(self) -> None:
        """Wake every waiter with SHUTDOWN; later waits return SHUTDOWN at once."""
        self._closed = True
        for waiters in list(self._by_key.values()):
            for waiter in list(waiters):
                waiter.wake(WakeReason.SHUTDOWN)

    async def wait(
        self,
        keys: Iterable[Key],
        timeout_s: float,
        tag_filter: TagFilter | None = None,
        abandon: asyncio.Future[Any] | None = None,
        unfiltered: Iterable[Key] = (),
    ) -> WakeReason:
        """Park until a matching arrival on any of ``keys``, the timeout, shutdown or abandon.

        An arrival on a key of ``unfiltered`` (which are waited on too) wakes the pull
        whatever its tag. Raises TooManyWaitersError when the cap is reached. ``abandon`` is
        the future (or task) the caller completes to give up early, e.g. when its HTTP client
        disconnects; it is not cancelled here, so one can serve several waits.
        """
        if self._closed:
            return WakeReason.SHUTDOWN
        if timeout_s <= 0:
            return WakeReason.TIMEOUT
        if self._parked >= self.max_parked:
            self.rejected += 1
            raise TooManyWaitersError(
                f"{self._parked} pulls are already parked (the cap is {self.max_parked}); "
                f"retry in {self.retry_after_s} s",
                retry_after_s=self.retry_after_s,
            )
        future: asyncio.Future[WakeReason] = asyncio.get_running_loop().create_future()
        if tag_filter is not None and tag_filter.matches_all:
            tag_filter = None
        free = frozenset(unfiltered)
        waiter = _Waiter(future, tag_filter, free)
        registered = list(dict.fromkeys([*keys, *free]))
        for key in registered:
            self._by_key.setdefault(key, set()).add(waiter)
        self._parked += 1
        try:
            return await self._park(future, timeout_s, abandon)
        finally:
            self._parked -= 1
            for key in registered:
                waiters = self._by_key.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._by_key[key]
            if not future.done():
                future.cancel()

    @staticmethod
    async def _park(
        future: asyncio.Future[WakeReason], timeout_s: float, abandon: asyncio.Future[Any] | None
    ) -> WakeReason:
        if abandon is None:
            done, _ = await asyncio.wait((future,), timeout=timeout_s)
            return future.result() if done else WakeReason.TIMEOUT
        done, _ = await asyncio.wait(
            (future, abandon), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
        if future in done:
            return future.result()
        if abandon in done:
            return WakeReason.ABANDONED
        return WakeReason.TIMEOUT

"""What the broker served to each group lately: for a pull delivery, its time and consumer.

A pull is not a delivery yet: the group's offset commit that covers it is (see
:mod:`services.trace.tracer`). Until then each pulled message is remembered here per group
and queue -- its id, where it was first sent, its attempt, when it was served and to whom --
within a bound: the oldest queues and messages are forgotten first.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from services.trace.events import Consumer

MAX_QUEUES: Final = 4096
"""(group, topic, queue) entries kept at most."""
MAX_PER_QUEUE: Final = 8192
"""Pulled messages kept at most per (group, topic, queue)."""

QueueOfGroup = tuple[str, str, int]
"""(group, topic, queue id): the topic the message was read from (a retry topic for a retry)."""


Served = tuple[str, str, int, list[str], int, Consumer | None]
"""One pulled message, what its delivery event needs: its id, the topic it was first sent to,
its attempt, its own keys, when it was served (ms) and to whom."""


class RecentPulls:
    """Pulled messages by (group, topic, queue) and queue offset, bounded."""

    __slots__ = ("_max_per_queue", "_max_queues", "_queues")

    def __init__(self, max_queues: int = MAX_QUEUES, max_per_queue: int = MAX_PER_QUEUE) -> None:
        self._queues: OrderedDict[QueueOfGroup, dict[int, Served]] = OrderedDict()
        self._max_queues = max_queues
        self._max_per_queue = max_per_queue

    def remember(self, key: QueueOfGroup, pulled: list[tuple[int, Served]]) -> None:
        """Note that these offsets of the queue were served; a later pull of one replaces
        what was noted of it."""
        queues = self._queues
        kept = queues.get(key)
        if kept is None:
            kept = queues[key] = {}
            if len(queues) > self._max_queues:
                queues.popitem(last=False)
        else:
            queues.move_to_end(key)
        kept.update(pulled)
        excess = len(kept) - self._max_per_queue
        if excess > 0:
            for stale in sorted(kept)[:excess]:
                del kept[stale]

    def take(self, key: QueueOfGroup, start: int, end: int) -> dict[int, Served]:
        """Forget and return what was served of ``[start, end)``; the rest stays."""
        pulled = self._queues.get(key)
        if not pulled:
            return {}
        if len(pulled) < end - start:
            taken = {o: s for o, s in pulled.items() if start <= o < end}
        else:
            taken = {o: pulled[o] for o in range(start, end) if o in pulled}
        for offset in taken:
            del pulled[offset]
        if not pulled:
            del self._queues[key]
        return taken

    def lowest(self, key: QueueOfGroup) -> int | None:
        """The lowest offset remembered for the queue; None when nothing is."""
        pulled = self._queues.get(key)
        return min(pulled) if pulled else None

    def forget_before(self, key: QueueOfGroup, offset: int) -> None:
        """Forget what was served below ``offset`` (a commit moved past it)."""
        pulled = self._queues.get(key)
        if pulled:
            for stale in [o for o in pulled if o < offset]:
                del pulled[stale]

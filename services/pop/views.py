"""Read-only views of the POP state for people: the admin pages and the lag report."""

from __future__ import annotations

import bisect
import time
from dataclasses import dataclass

from services.pop.inflight import InFlightTable


@dataclass(frozen=True, slots=True)
class QueueView:
    """One queue of a POP group."""

    topic: str
    queue_id: int
    pop_offset: int  # the next offset a receive takes
    in_flight: int
    oldest_in_flight_ms: int  # age of the oldest in-flight delivery; 0 when none
    next_redelivery_ms: int | None  # the earliest deadline, epoch ms


@dataclass(frozen=True, slots=True)
class InFlightView:
    """One in-flight message."""

    topic: str
    queue_id: int
    offset: int
    attempt: int
    holder: str  # the token name of the receiver, where auth is on
    returns_at_ms: int
    ready: bool  # FIFO: due again, waiting for the next receive


def in_flight_by_queue(table: InFlightTable, group: str) -> dict[tuple[str, int], int]:
    """The group's messages in flight by (topic, queue id)."""
    return {
        (topic, queue_id): len(state.entries)
        for (name, topic, queue_id), state in table.queues.items()
        if name == group and state.entries
    }


def queue_views(table: InFlightTable, group: str) -> list[QueueView]:
    """Per queue of a group: in flight, the oldest in-flight age, the next redelivery."""
    now = time.time_ns() // 1_000_000
    views = []
    for (name, topic, queue_id), state in sorted(table.queues.items()):
        if name != group:
            continue
        entries = list(state.entries.values())
        views.append(
            QueueView(
                topic,
                queue_id,
                state.pop_offset,
                len(entries),
                max((now - e.pop_time_ms for e in entries), default=0),
                min((e.deadline_ms for e in entries if not e.ready), default=None),
            )
        )
    return views


InFlightKey = tuple[str, int, int]  # (topic, queue id, offset): the in-flight list's order


@dataclass(frozen=True, slots=True)
class InFlightPage:
    """A page of a group's in-flight messages, by topic, queue and offset."""

    items: list[InFlightView]
    total: int  # in flight in the whole group
    first: int  # 1-based position of the page's first item
    more: bool  # items follow the page

    @property
    def next_after(self) -> InFlightKey | None:
        """The key to continue from; None on the last page."""
        if not self.more or not self.items:
            return None
        last = self.items[-1]
        return last.topic, last.queue_id, last.offset


def in_flight_page(
    table: InFlightTable, group: str, after: InFlightKey | None, limit: int
) -> InFlightPage:
    """At most ``limit`` of the group's in-flight messages whose key follows ``after``.

    The order is (topic, queue id, offset), which a delivery's deadline or attempt does not
    change, so walking the pages lists each message still in flight once."""
    keys = sorted(
        (topic, queue_id, offset)
        for (name, topic, queue_id), state in table.queues.items()
        if name == group
        for offset in state.entries
    )
    start = bisect.bisect_right(keys, after) if after is not None else 0
    items = []
    for topic, queue_id, offset in keys[start : start + limit]:
        e = table.queues[(group, topic, queue_id)].entries[offset]
        items.append(
            InFlightView(topic, queue_id, offset, e.attempt, e.holder, e.deadline_ms, e.ready)
        )
    return InFlightPage(items, len(keys), start + 1, start + limit < len(keys))

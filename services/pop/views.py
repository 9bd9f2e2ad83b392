"""Read-only views of the POP state for people: the admin pages and the lag report."""

from __future__ import annotations

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


def in_flight_list(table: InFlightTable, group: str, limit: int = 500) -> list[InFlightView]:
    """The group's in-flight messages, the ones returning first first."""
    items = [
        InFlightView(topic, queue_id, e.offset, e.attempt, e.holder, e.deadline_ms, e.ready)
        for (name, topic, queue_id), state in table.queues.items()
        if name == group
        for e in state.entries.values()
    ]
    items.sort(key=lambda v: (v.returns_at_ms, v.topic, v.queue_id, v.offset))
    return items[:limit]

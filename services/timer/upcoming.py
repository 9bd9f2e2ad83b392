"""What the wheel holds: timer messages still to be delivered, counted per topic and time
bucket, and the next ones with their cancel handles (the admin page of upcoming deliveries).

Read from the wheel and the timer log, one slot after another from the read time, and the
CommitLog records they point at; never a copy of every waiting message. A rolled record
(due beyond the roll window) counts at its ``TIMER_OUT_MS``, not at its roll.

A message is due at the time its producer asked for (``TIMER_DELIVER_MS``, the receipt's
``deliver_at``), which the wheel rounds to a slot: ``TIMER_OUT_MS`` is that slot's start,
before the due time, and the slot fires one precision later, at or after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Final

from storage import StoredMessage
from storage.record.properties import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
)
from storage.timer import cancel_key

TIMER_BUCKETS: Final = (
    ("within 1 min", 60_000),
    ("1-10 min", 600_000),
    ("10 min-1 h", 3_600_000),
    ("1 h-1 day", 86_400_000),
    ("later", None),
)
"""Time-bucket labels and their upper bounds (ms from now; None: no bound)."""


@dataclasses.dataclass(frozen=True, slots=True)
class UpcomingTimer:
    topic: str
    uniq_key: str
    fire_ms: int  # TIMER_OUT_MS: the start of its slot, which fires one precision later
    rolls: bool  # due beyond the roll window: stored again at the roll
    due_ms: int  # when it asked to be delivered: never before, at most one precision after
    message: StoredMessage  # its record in the timer topic (body, keys, properties)


@dataclasses.dataclass(frozen=True, slots=True)
class UpcomingTimers:
    now_ms: int
    counts: dict[str, list[int]]  # topic -> a count per bucket of TIMER_BUCKETS
    next: list[UpcomingTimer]  # soonest first
    scanned: int  # units read from the wheel
    complete: bool  # False when the scan stopped at its limit: counts are a lower bound

    @property
    def total(self) -> int:
        return sum(sum(row) for row in self.counts.values())


def bucket_of(delay_ms: int) -> int:
    """The index in TIMER_BUCKETS of a delivery ``delay_ms`` from now."""
    for index, (_, upper) in enumerate(TIMER_BUCKETS):
        if upper is not None and delay_ms < upper:
            return index
    return len(TIMER_BUCKETS) - 1


def due_ms_of(record: StoredMessage, fire_ms: int, precision_ms: int) -> int:
    """When a timer record asked to be delivered: its ``TIMER_DELIVER_MS``; without one, the
    end of its slot (the time it fires)."""
    asked = record.properties.get(PROPERTY_TIMER_DELIVER_MS, "")
    return int(asked) if asked.isdigit() else fire_ms + precision_ms


def upcoming_of(
    records: Iterable[tuple[StoredMessage, bool]],
    cancelled: set[str],
    now_ms: int,
    *,
    topic: str | None,
    next_count: int,
    precision_ms: int,
) -> tuple[dict[str, list[int]], list[UpcomingTimer]]:
    """Counts per topic and bucket, and the ``next_count`` soonest, of ``records`` (each with
    whether its unit is a roll) that are not cancelled and belong to ``topic`` (None: all);
    a message counts in the bucket of its due time."""
    counts: dict[str, list[int]] = {}
    waiting: list[UpcomingTimer] = []
    seen: set[str] = set()  # a rebuilt wheel may hold a rolled record and its re-put
    for record, rolls in records:
        properties = record.properties
        real_topic = properties.get(PROPERTY_REAL_TOPIC, "")
        uniq_key = properties.get(PROPERTY_UNIQ_KEY, "")
        out = properties.get(PROPERTY_TIMER_OUT_MS, "")
        if not real_topic or not out.isdigit() or (topic is not None and real_topic != topic):
            continue
        key = cancel_key(real_topic, uniq_key)
        if key in cancelled or key in seen:
            continue
        seen.add(key)
        fire_ms = int(out)
        due_ms = due_ms_of(record, fire_ms, precision_ms)
        row = counts.setdefault(real_topic, [0] * len(TIMER_BUCKETS))
        row[bucket_of(due_ms - now_ms)] += 1
        waiting.append(UpcomingTimer(real_topic, uniq_key, fire_ms, rolls, due_ms, record))
    waiting.sort(key=lambda timer: (timer.due_ms, timer.fire_ms))
    return dict(sorted(counts.items())), waiting[:next_count]

"""What the POP service tells the message trace: how in-flight deliveries ended."""

from __future__ import annotations

import dataclasses
from typing import Any

from services.pop.inflight import InFlight, InFlightTable, QueueKey
from services.trace.tracer import Tracer


def in_flight_of(
    tracer: Tracer, table: InFlightTable, pending: dict[tuple[QueueKey, str], list[int]]
) -> dict[QueueKey, list[tuple[str, InFlight]]]:
    """The in-flight entries (copied, with their CK ids) of ``pending`` acks, by queue, where
    the queue's topic is traced: read before the acks take them out of flight."""
    found: dict[QueueKey, list[tuple[str, InFlight]]] = {}
    for (key, ck_id), offsets in pending.items():
        if not tracer.topic_on(key[1]):
            continue
        for offset in offsets:
            entry = table.entry(key, offset)
            if entry is not None:
                found.setdefault(key, []).append((ck_id, dataclasses.replace(entry)))
    return found


def trace_outcome(
    tracer: Tracer,
    outcome: str,
    key: QueueKey,
    deliveries: list[tuple[str, InFlight]],
    at: int,
    detail: dict[str, Any] | None = None,
    replaced_by: str | None = None,
) -> None:
    """Tell ``tracer`` how POP deliveries (CK id, entry) of ``key`` ended (acked, nacked,
    invisibility_changed, revived) at ``at``; nothing when the topic is not traced."""
    if not deliveries or not tracer.topic_on(key[1]):
        return
    tracer.pop_outcome(
        outcome,
        *key,
        [(ck, (e.offset, e.attempt, e.pop_time_ms, e.holder)) for ck, e in deliveries],
        detail,
        at=at,
        replaced_by=replaced_by,
    )

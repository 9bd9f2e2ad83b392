"""In-process counters the HTTP layer renders as Prometheus text.

Everything here is touched from the event loop thread only, so plain ints suffice.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass, field

PULL_DURATION_BUCKETS_S: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)


@dataclass(slots=True)
class Histogram:
    """A cumulative-bucket histogram (Prometheus ``le`` semantics)."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, observations at or below it) per bucket."""
        running = 0
        result = []
        for bound, count in zip(self.buckets, self.counts, strict=True):
            running += count
            result.append((bound, running))
        return result


@dataclass(slots=True)
class Metrics:
    """Traffic counters per topic and pull latency."""

    messages_in: Counter[str] = field(default_factory=Counter)
    bytes_in: Counter[str] = field(default_factory=Counter)
    messages_out: Counter[str] = field(default_factory=Counter)
    bytes_out: Counter[str] = field(default_factory=Counter)
    sends_replayed: Counter[str] = field(default_factory=Counter)  # keyed repeats, per topic
    pull_duration: Histogram = field(default_factory=lambda: Histogram(PULL_DURATION_BUCKETS_S))
    # POP consumption (services.pop)
    pop_received: int = 0  # messages handed out by receives
    pop_acked: int = 0  # messages acked (a repeated ack of one counts once)
    pop_ack_expired: int = 0  # acks answered "expired"
    pop_expired: int = 0  # deliveries whose invisibility ran out
    pop_redelivered: int = 0  # of those, copies put back into %RETRY%<group>
    pop_dead_lettered: int = 0  # of those, sent to %DLQ%<group>
    # Transactions (services.transaction): prepared, committed, rolled_back, checked, gave_up
    transactions: Counter[str] = field(default_factory=Counter)
    # Message trace (services.trace): events stored, and dropped by reason ("queue_full": the
    # writer's queue was full; "not_stored": the store refused or failed the put)
    trace_events_written: int = 0
    trace_events_dropped: Counter[str] = field(default_factory=Counter)

    def sent(self, topic: str, count: int, size: int) -> None:
        self.messages_in[topic] += count
        self.bytes_in[topic] += size

    def delivered(self, topic: str, count: int, size: int) -> None:
        if count:
            self.messages_out[topic] += count
            self.bytes_out[topic] += size

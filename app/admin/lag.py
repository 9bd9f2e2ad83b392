"""Consumer lag for the pages: the offset service's report plus lag in seconds.

Lag in messages and in seconds comes from :meth:`services.offsets.OffsetService.report`:
the same numbers as ``GET /v1/groups/{group}/offsets``.
"""

from __future__ import annotations

from dataclasses import dataclass

from services import Broker, QueueLag, TopicLag, in_flight_by_queue


@dataclass(frozen=True, slots=True)
class QueueLagRow:
    topic: str
    queue_id: int
    broker_offset: int  # the queue's max offset: where the next message will go
    committed_offset: int  # the next offset the group will consume
    min_offset: int
    lag: int  # messages
    lag_seconds: float | None  # age of the oldest unconsumed message; None when unknown
    last_commit_timestamp: int  # ms; 0 when never committed (or unknown)
    in_flight: int = 0  # POP: received and not acked yet (counted in ``lag`` too)


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: str
    rows: list[QueueLagRow]

    @property
    def total_lag(self) -> int:
        return sum(row.lag for row in self.rows)

    @property
    def lag_seconds(self) -> float:
        """The oldest unconsumed message's age over every queue (0 when none waits)."""
        return max((row.lag_seconds or 0.0 for row in self.rows), default=0.0)

    @property
    def in_flight(self) -> int:
        return sum(row.in_flight for row in self.rows)

    @property
    def topics(self) -> list[str]:
        return sorted({row.topic for row in self.rows})

    def by_topic(self) -> dict[str, list[QueueLagRow]]:
        grouped: dict[str, list[QueueLagRow]] = {}
        for row in self.rows:
            grouped.setdefault(row.topic, []).append(row)
        return grouped


def group_names(broker: Broker) -> list[str]:
    """Groups with a config or with committed offsets (auto-created groups have both)."""
    names = {config.group_name for config in broker.groups.all()}
    names.update(broker.consumer_offsets.groups())
    return sorted(names)


def group_lag(broker: Broker, group: str, topic: str | None = None) -> GroupLag:
    """Every queue ``group`` has an offset on (on ``topic`` only, when given), with its POP
    messages in flight."""
    in_flight = in_flight_by_queue(broker.pop.table, group)
    rows = [
        _row(topic_lag, queue, in_flight.get((topic_lag.topic, queue.queue_id), 0))
        for topic_lag in broker.offsets.report(group, topic)
        for queue in sorted(topic_lag.queues, key=lambda q: q.queue_id)
    ]
    return GroupLag(group, rows)


def all_group_lags(broker: Broker) -> list[GroupLag]:
    return [group_lag(broker, name) for name in group_names(broker)]


def _row(topic_lag: TopicLag, queue: QueueLag, in_flight: int) -> QueueLagRow:
    return QueueLagRow(
        topic=topic_lag.topic,
        queue_id=queue.queue_id,
        broker_offset=queue.max_offset,
        committed_offset=queue.committed_offset,
        min_offset=queue.min_offset,
        lag=queue.lag,
        lag_seconds=queue.lag_seconds,
        last_commit_timestamp=queue.last_commit_timestamp,
        in_flight=in_flight,
    )

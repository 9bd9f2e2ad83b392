"""Lag snapshots from store files, without pyspark: one row per (store, group, topic, queue).

A *snapshot* is one run's view of every queue a group reads: the broker's min and max offsets
from the ConsumeQueue files, the committed offset from ``consumerOffset.json`` (-1 when the
group never committed that queue; the queue's min offset is then its position), and the lag
in messages and in seconds as :mod:`storage.lag_model` defines them.

Retry topics (``%RETRY%<group>``) get queue rows of their own (kind ``retry``); dead-letter
topics (``%DLQ%<group>``) only add up to the group's DLQ depth.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from spark_jobs.lag.pop_state import read_pop_in_flight
from storage.lag_model import NOT_COMMITTED, consume_position, dlq_depth, queue_lag_figures
from storage.store_reader import (
    QueueOffsets,
    all_queue_offsets,
    read_consumer_offsets,
    read_subscription_groups,
    store_timestamp_at_queue_offset,
)
from storage.topic_names import DLQ_GROUP_TOPIC_PREFIX as DLQ_PREFIX
from storage.topic_names import RETRY_GROUP_TOPIC_PREFIX as RETRY_PREFIX
from storage.topic_names import TRACE_TOPIC

KIND_NORMAL: Final = "normal"
KIND_RETRY: Final = "retry"

QueueKey = tuple[str, str, str, int]
"""(store dir, group, topic, queue id)"""


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """One queue of one group at one moment."""

    snapshot_ms: int
    store_dir: str
    group: str
    topic: str
    topic_kind: str
    queue_id: int
    min_offset: int
    max_offset: int
    committed_offset: int  # NOT_COMMITTED (-1): the group never committed this queue
    lag: int
    lag_seconds: float | None  # None when the oldest unconsumed message cannot be read
    oldest_unconsumed_ms: int | None
    last_commit_ms: int | None
    # POP groups: received and not acked yet (also inside ``lag``: a POP group's committed
    # offset is its lowest un-acked offset), from the broker's last POP snapshot.
    in_flight: int = 0

    @property
    def key(self) -> QueueKey:
        """The queue's identity across snapshots."""
        return (self.store_dir, self.group, self.topic, self.queue_id)

    @property
    def never_committed(self) -> bool:
        """Whether the group has never committed an offset on this queue."""
        return self.committed_offset < 0

    @property
    def position(self) -> int:
        """Where the group consumes from: the committed offset, else the queue's min offset."""
        return consume_position(self.committed_offset, self.min_offset)

    @property
    def data_loss(self) -> bool:
        """Messages expired before the group consumed them (committed below the min offset)."""
        return not self.never_committed and self.committed_offset < self.min_offset


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every queue row of one run, plus what only adds up per group."""

    now_ms: int
    queues: list[QueueSnapshot]
    dlq_depth: dict[str, int] = field(default_factory=dict)
    groups: set[str] = field(default_factory=set)
    stores: list[str] = field(default_factory=list)


def topic_kind(topic: str) -> str:
    """``retry`` for ``%RETRY%…`` topics, else ``normal``."""
    return KIND_RETRY if topic.startswith(RETRY_PREFIX) else KIND_NORMAL


def queue_lag(
    store_dir: str,
    group: str,
    topic: str,
    queue: QueueOffsets,
    committed: int,
    last_commit_ms: int | None,
    now_ms: int,
    in_flight: int = 0,
) -> QueueSnapshot:
    """The snapshot row of one queue: lag in messages and seconds from the store files, as
    :mod:`storage.lag_model` defines them (the offsets service and the admin pages too)."""

    def store_time_at(offset: int) -> int | None:
        return store_timestamp_at_queue_offset(Path(store_dir), topic, queue.queue_id, offset)

    figures = queue_lag_figures(
        committed, queue.min_offset, queue.max_offset, store_time_at, now_ms
    )
    return QueueSnapshot(
        snapshot_ms=now_ms,
        store_dir=store_dir,
        group=group,
        topic=topic,
        topic_kind=topic_kind(topic),
        queue_id=queue.queue_id,
        min_offset=queue.min_offset,
        max_offset=queue.max_offset,
        committed_offset=committed,
        lag=figures.lag,
        lag_seconds=figures.lag_seconds,
        oldest_unconsumed_ms=figures.oldest_unconsumed_ms,
        last_commit_ms=last_commit_ms,
        in_flight=in_flight,
    )


def _groups_of_store(
    store_dir: str, topics: Iterable[str], offset_groups: Iterable[str]
) -> set[str]:
    """Groups named by offsets, subscriptionGroup.json, or retry/DLQ topic names."""
    groups = set(offset_groups) | set(read_subscription_groups(Path(store_dir)))
    for topic in topics:
        for prefix in (RETRY_PREFIX, DLQ_PREFIX):
            if topic.startswith(prefix) and len(topic) > len(prefix):
                groups.add(topic[len(prefix) :])
    return groups


def snapshot_store(store_dir: str, now_ms: int) -> Snapshot:
    """Every queue row of one store (its groups' topics and retry topics) and DLQ depths."""
    queues: dict[str, dict[int, QueueOffsets]] = defaultdict(dict)
    for found in all_queue_offsets(Path(store_dir)):
        queues[found.topic][found.queue_id] = found
    committed = read_consumer_offsets(Path(store_dir))
    in_flight = read_pop_in_flight(Path(store_dir))
    groups = _groups_of_store(store_dir, queues, committed.groups())
    pairs = {
        (t, g)
        for t, g in committed.offsets
        if not t.startswith(DLQ_PREFIX) and t != TRACE_TOPIC  # the broker's trace: not a backlog
    }
    pairs |= {(RETRY_PREFIX + g, g) for g in groups if RETRY_PREFIX + g in queues}
    rows = []
    for topic, group in sorted(pairs):
        offsets = committed.offsets.get((topic, group), {})
        times = committed.commit_times.get((topic, group), {})
        for queue_id in sorted(set(queues[topic]) | set(offsets)):
            queue = queues[topic].get(queue_id, QueueOffsets(topic, queue_id, 0, 0))
            rows.append(
                queue_lag(
                    store_dir,
                    group,
                    topic,
                    queue,
                    offsets.get(queue_id, NOT_COMMITTED),
                    times.get(queue_id),
                    now_ms,
                    in_flight.get((group, topic, queue_id), 0),
                )
            )
    dlq = {}
    for group in groups:
        # Waiting dead letters: from the group's redrive watermark on its DLQ queue.
        dlq_offsets = committed.offsets.get((DLQ_PREFIX + group, group), {})
        dlq[group] = sum(
            dlq_depth(
                dlq_offsets.get(queue.queue_id, NOT_COMMITTED), queue.min_offset, queue.max_offset
            ).waiting
            for queue in queues.get(DLQ_PREFIX + group, {}).values()
        )
    return Snapshot(now_ms, rows, dlq, groups, [store_dir])


def take_snapshot(store_dirs: Sequence[str], now_ms: int) -> Snapshot:
    """One snapshot over several stores (a group's queues on every broker)."""
    rows: list[QueueSnapshot] = []
    dlq: dict[str, int] = defaultdict(int)
    groups: set[str] = set()
    for store_dir in store_dirs:
        part = snapshot_store(store_dir, now_ms)
        rows.extend(part.queues)
        groups |= part.groups
        for group, depth in part.dlq_depth.items():
            dlq[group] += depth
    return Snapshot(now_ms, rows, dict(dlq), groups, list(store_dirs))

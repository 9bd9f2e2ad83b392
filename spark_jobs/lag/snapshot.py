"""Consumer lag, without pyspark: snapshots from store files, Burrow statuses, drain estimates.

A *snapshot* is one run's view of every (store, group, topic, queue): the broker's min and max
offsets from the ConsumeQueue files, the committed offset from ``consumerOffset.json`` (-1 when
the group never committed that queue; the queue's min offset is then its position), the lag in
messages (max offset - position), and the lag in seconds (now - store time of the oldest
unconsumed message, read through the ConsumeQueue unit at the position).

Statuses follow LinkedIn Burrow's rules over a *window* of the last N snapshots of a queue
(see :func:`evaluate_window`). A group's status is its worst queue's. The consume and produce
rates come from the first and last snapshot of the window, and give the time to drain.

Retry topics (``%RETRY%<group>``) get queue rows of their own (kind ``retry``) and add up to
the group's retry depth; dead-letter topics (``%DLQ%<group>``) only to its DLQ depth. Group
totals and statuses cover the group's normal topics.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Final

from storage.store_reader import (
    QueueOffsets,
    all_queue_offsets,
    read_consumer_offsets,
    read_subscription_groups,
    store_timestamp_at_queue_offset,
)

RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
KIND_NORMAL: Final = "normal"
KIND_RETRY: Final = "retry"
DEFAULT_WINDOW: Final = 10


class Status(Enum):
    """Burrow's statuses, in increasing severity (NOTFOUND: a group with no queues)."""

    NOTFOUND = "NOTFOUND"
    OK = "OK"
    WARN = "WARN"
    STOP = "STOP"
    STALL = "STALL"
    REWIND = "REWIND"

    @property
    def severity(self) -> int:
        """Burrow's order: OK < WARN < STOP < STALL < REWIND."""
        return _SEVERITY[self]

    @property
    def is_error(self) -> bool:
        """STOP, STALL and REWIND are errors; WARN is a warning."""
        return self.severity >= _SEVERITY[Status.STOP]


_SEVERITY: Final = {
    Status.NOTFOUND: 0,
    Status.OK: 1,
    Status.WARN: 2,
    Status.STOP: 4,
    Status.STALL: 5,
    Status.REWIND: 6,
}

QueueKey = tuple[str, str, str, int]
"""(store dir, group, topic, queue id)"""


# --------------------------------------------------------------------------- snapshots


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
    committed_offset: int  # -1: the group never committed this queue
    lag: int
    lag_seconds: float | None  # None when the oldest unconsumed message cannot be read
    oldest_unconsumed_ms: int | None
    last_commit_ms: int | None

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
        return self.min_offset if self.never_committed else self.committed_offset

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
) -> QueueSnapshot:
    """The snapshot row of one queue: lag in messages and seconds from the store files."""
    position = queue.min_offset if committed < 0 else committed
    lag = max(0, queue.max_offset - position)
    oldest: int | None = None
    lag_seconds: float | None = 0.0
    if lag > 0:
        readable = max(position, queue.min_offset)
        oldest = store_timestamp_at_queue_offset(Path(store_dir), topic, queue.queue_id, readable)
        lag_seconds = None if oldest is None else max(0.0, (now_ms - oldest) / 1000)
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
        lag=lag,
        lag_seconds=lag_seconds,
        oldest_unconsumed_ms=oldest,
        last_commit_ms=last_commit_ms,
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
    groups = _groups_of_store(store_dir, queues, committed.groups())
    pairs = {(t, g) for t, g in committed.offsets if not t.startswith(DLQ_PREFIX)}
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
                    offsets.get(queue_id, -1),
                    times.get(queue_id),
                    now_ms,
                )
            )
    dlq = {}
    for group in groups:
        dlq_offsets = committed.offsets.get((DLQ_PREFIX + group, group), {})
        depth = 0
        for queue in queues.get(DLQ_PREFIX + group, {}).values():
            position = dlq_offsets.get(queue.queue_id, queue.min_offset)
            depth += max(0, queue.max_offset - max(position, queue.min_offset))
        dlq[group] = depth
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


# --------------------------------------------------------------------------- Burrow rules


@dataclass(frozen=True, slots=True)
class WindowEntry:
    """What a snapshot recorded about one queue: the history row the rules read."""

    snapshot_ms: int
    position: int
    lag: int
    max_offset: int
    last_commit_ms: int | None = None


def entry_of(row: QueueSnapshot) -> WindowEntry:
    """The window entry of a snapshot row."""
    return WindowEntry(row.snapshot_ms, row.position, row.lag, row.max_offset, row.last_commit_ms)


def commit_stamps(entries: Sequence[WindowEntry]) -> list[int]:
    """The commit time of each entry: the recorded last commit time when known; otherwise
    the snapshot at which the position last moved (a commit happened since the one before)."""
    stamps: list[int] = []
    for index, entry in enumerate(entries):
        if entry.last_commit_ms is not None:
            stamps.append(entry.last_commit_ms)
        elif index > 0 and entry.position == entries[index - 1].position:
            stamps.append(stamps[-1])
        else:
            stamps.append(entry.snapshot_ms)
    return stamps


def evaluate_window(entries: Sequence[WindowEntry], now_ms: int) -> Status:
    """Burrow's status of one queue over its window (oldest entry first).

    OK when the current lag is 0 or the lag was 0 anywhere in the window, and when the window
    holds fewer than two entries (no evidence yet). Otherwise, in order:

    1. REWIND: the committed offset went backwards between two entries;
    2. STOP: the time since the last commit exceeds the time the window's commits span;
    3. STALL: the offset never changed across the window (while commits kept arriving);
    4. WARN: the lag never decreased across the window;
    5. OK.
    """
    if len(entries) < 2:
        return Status.OK
    if entries[-1].lag <= 0 or any(entry.lag == 0 for entry in entries):
        return Status.OK
    pairs = list(itertools.pairwise(entries))
    if any(later.position < earlier.position for earlier, later in pairs):
        return Status.REWIND
    stamps = commit_stamps(entries)
    if now_ms - stamps[-1] > stamps[-1] - stamps[0]:
        return Status.STOP
    if all(entry.position == entries[0].position for entry in entries):
        return Status.STALL
    if all(later.lag >= earlier.lag for earlier, later in pairs):
        return Status.WARN
    return Status.OK


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status (NOTFOUND for none)."""
    return max(statuses, key=lambda s: s.severity, default=Status.NOTFOUND)


@dataclass(frozen=True, slots=True)
class Rates:
    """Consume and produce rates over a window, in messages per second (None: not known)."""

    consume: float | None
    produce: float | None


def window_rates(entries: Sequence[WindowEntry]) -> Rates:
    """Rates between the window's first and last entry (None with fewer than two)."""
    if len(entries) < 2:
        return Rates(None, None)
    first, last = entries[0], entries[-1]
    seconds = (last.snapshot_ms - first.snapshot_ms) / 1000
    if seconds <= 0:
        return Rates(None, None)
    consumed = max(0, last.position - first.position)
    produced = max(0, last.max_offset - first.max_offset)
    return Rates(consumed / seconds, produced / seconds)


def time_to_drain(lag: int, rates: Rates) -> float | None:
    """Seconds until the lag reaches 0 at the current rates; None when it does not shrink
    (or the rates are unknown); 0 when there is no lag."""
    if lag <= 0:
        return 0.0
    if rates.consume is None or rates.produce is None:
        return None
    net = rates.consume - rates.produce
    return lag / net if net > 0 else None


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True, slots=True)
class QueueLag:
    """A queue row of the report: the snapshot plus what its window says."""

    snapshot: QueueSnapshot
    status: Status
    rates: Rates
    time_to_drain_seconds: float | None
    window_entries: int


@dataclass(frozen=True, slots=True)
class MaxLagQueue:
    """Where a group's largest lag is."""

    store_dir: str
    topic: str
    queue_id: int
    lag: int


@dataclass(frozen=True, slots=True)
class GroupLag:
    """A group row of the report (normal topics; retry and DLQ depths apart)."""

    group: str
    status: Status
    total_lag: int
    max_lag: MaxLagQueue | None
    max_lag_seconds: float | None
    queues: int
    never_committed_queues: int
    rates: Rates
    time_to_drain_seconds: float | None
    retry_depth: int
    dlq_depth: int
    last_commit_ms: int | None
    complete: float  # share of the window filled, for the least-known queue


@dataclass(frozen=True, slots=True)
class LagReport:
    """Everything a lag-report run produces."""

    now_ms: int
    stores: list[str]
    window: int
    queues: list[QueueLag]
    groups: list[GroupLag]


def build_window(
    past: Sequence[WindowEntry], current: QueueSnapshot, window: int
) -> list[WindowEntry]:
    """The last ``window`` entries: past snapshots (any order) then the current one."""
    by_time = {
        entry.snapshot_ms: entry for entry in past if entry.snapshot_ms < current.snapshot_ms
    }
    ordered = [by_time[t] for t in sorted(by_time)]
    ordered.append(entry_of(current))
    return ordered[-window:]


def evaluate(
    snapshot: Snapshot,
    history: Mapping[QueueKey, Sequence[WindowEntry]],
    window: int = DEFAULT_WINDOW,
) -> LagReport:
    """Statuses, rates and group totals of a snapshot, given each queue's past entries."""
    queues = []
    for row in snapshot.queues:
        entries = build_window(history.get(row.key, ()), row, window)
        rates = window_rates(entries)
        queues.append(
            QueueLag(
                snapshot=row,
                status=evaluate_window(entries, snapshot.now_ms),
                rates=rates,
                time_to_drain_seconds=time_to_drain(row.lag, rates),
                window_entries=len(entries),
            )
        )
    groups = [
        summarize_group(group, queues, snapshot.dlq_depth.get(group, 0), window)
        for group in sorted(snapshot.groups | {q.snapshot.group for q in queues})
    ]
    return LagReport(snapshot.now_ms, snapshot.stores, window, queues, groups)


def _sum_rates(rates: Iterable[Rates]) -> Rates:
    consume = produce = 0.0
    for rate in rates:
        if rate.consume is None or rate.produce is None:
            return Rates(None, None)
        consume += rate.consume
        produce += rate.produce
    return Rates(consume, produce)


def summarize_group(
    group: str, queues: Sequence[QueueLag], dlq_depth: int, window: int
) -> GroupLag:
    """A group's totals over its normal queues, its worst status and its retry/DLQ depth."""
    mine = [q for q in queues if q.snapshot.group == group]
    normal = [q for q in mine if q.snapshot.topic_kind == KIND_NORMAL]
    retry_depth = sum(q.snapshot.lag for q in mine if q.snapshot.topic_kind == KIND_RETRY)
    total = sum(q.snapshot.lag for q in normal)
    top = max(normal, key=lambda q: (q.snapshot.lag, q.snapshot.lag_seconds or 0.0), default=None)
    seconds = [q.snapshot.lag_seconds for q in normal if q.snapshot.lag_seconds is not None]
    commits = [q.snapshot.last_commit_ms for q in normal if q.snapshot.last_commit_ms is not None]
    rates = _sum_rates(q.rates for q in normal) if normal else Rates(None, None)
    return GroupLag(
        group=group,
        status=worst(q.status for q in normal),
        total_lag=total,
        max_lag=None
        if top is None
        else MaxLagQueue(
            top.snapshot.store_dir, top.snapshot.topic, top.snapshot.queue_id, top.snapshot.lag
        ),
        max_lag_seconds=max(seconds) if seconds else None,
        queues=len(normal),
        never_committed_queues=sum(1 for q in normal if q.snapshot.never_committed),
        rates=rates,
        time_to_drain_seconds=time_to_drain(total, rates) if normal else None,
        retry_depth=retry_depth,
        dlq_depth=dlq_depth,
        last_commit_ms=max(commits) if commits else None,
        complete=min((q.window_entries / window for q in normal), default=0.0),
    )


def worst_queues(report: LagReport, limit: int = 20) -> list[QueueLag]:
    """The queues an operator looks at first: errors, then the oldest and longest backlogs."""
    lagging = [q for q in report.queues if q.snapshot.lag > 0 or q.status.is_error]
    return sorted(
        lagging,
        key=lambda q: (
            -q.status.severity,
            -(q.snapshot.lag_seconds or 0.0),
            -q.snapshot.lag,
            q.snapshot.key,
        ),
    )[:limit]


def group_totals(rows: Iterable[QueueSnapshot]) -> dict[str, dict[int, int]]:
    """Total lag of each group's normal queues per snapshot time: group -> {ms: lag}."""
    totals: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        if row.topic_kind == KIND_NORMAL:
            totals[row.group][row.snapshot_ms] += row.lag
    return {group: dict(series) for group, series in totals.items()}


__all__ = [
    "DEFAULT_WINDOW",
    "GroupLag",
    "LagReport",
    "QueueLag",
    "QueueSnapshot",
    "Rates",
    "Snapshot",
    "Status",
    "WindowEntry",
    "build_window",
    "commit_stamps",
    "evaluate",
    "evaluate_window",
    "group_totals",
    "queue_lag",
    "snapshot_store",
    "summarize_group",
    "take_snapshot",
    "time_to_drain",
    "window_rates",
    "worst",
    "worst_queues",
]

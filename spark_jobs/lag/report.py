"""The lag report of one run: each queue's snapshot with its window's status, and group totals.

Group totals and statuses cover the group's normal topics; retry topics add up to the retry
depth and dead-letter topics to the DLQ depth.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from spark_jobs.lag.burrow import (
    DEFAULT_WINDOW,
    Rates,
    Status,
    WindowEntry,
    evaluate_window,
    time_to_drain,
    window_rates,
    worst,
)
from spark_jobs.lag.snapshot import KIND_NORMAL, KIND_RETRY, QueueKey, QueueSnapshot, Snapshot


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


def entry_of(row: QueueSnapshot) -> WindowEntry:
    """The window entry of a snapshot row."""
    return WindowEntry(row.snapshot_ms, row.position, row.lag, row.max_offset, row.last_commit_ms)


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

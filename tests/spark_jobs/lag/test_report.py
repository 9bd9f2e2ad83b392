"""report: one run's report of group summaries, worst queues, and each queue's window."""

from __future__ import annotations

import pytest

from spark_jobs.lag.burrow import (
    Rates,
    Status,
    WindowEntry,
)
from spark_jobs.lag.report import build_window, evaluate, worst_queues
from spark_jobs.lag.snapshot import QueueSnapshot, take_snapshot
from tests.spark_jobs.lag.conftest import KnownStore, entries, minute


def test_group_summary_of_a_single_snapshot(known_store: KnownStore) -> None:
    report = evaluate(take_snapshot([known_store.store_dir], known_store.now), {})
    groups = {g.group: g for g in report.groups}
    billing = groups["billing"]
    assert (billing.total_lag, billing.retry_depth, billing.dlq_depth) == (6, 3, 2)
    assert billing.max_lag is not None and billing.max_lag.lag == 6
    assert (billing.max_lag.topic, billing.max_lag.queue_id) == ("Orders", 0)
    assert billing.status is Status.OK  # one snapshot is no evidence yet
    assert billing.complete == pytest.approx(0.1)
    assert billing.rates == Rates(None, None) and billing.time_to_drain_seconds is None
    audit = groups["audit"]
    assert (audit.total_lag, audit.never_committed_queues, audit.queues) == (5, 1, 2)
    assert groups["ghost"].status is Status.NOTFOUND and groups["ghost"].queues == 0
    worst_first = worst_queues(report)
    assert [(q.snapshot.group, q.snapshot.queue_id) for q in worst_first][:1] == [("billing", 0)]


def test_window_building() -> None:
    current = QueueSnapshot(minute(5), "/s", "g", "T", "normal", 0, 0, 50, 40, 10, 1.0, None, None)
    past = [*entries([1, 2, 3, 4], [9, 8, 7, 6]), entries([9], [9])[0]]  # a duplicate time
    window = build_window(past, current, 3)
    assert [e.snapshot_ms for e in window] == [minute(2), minute(3), minute(5)]
    assert window[-1] == WindowEntry(minute(5), 40, 10, 50, None)

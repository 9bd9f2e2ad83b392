"""Lag without Spark: hand-computed lag of a store with known offsets, Burrow's rules."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.pop.state_file import PopSnapshot, save_snapshot
from spark_jobs.lag.burrow import (
    Rates,
    Status,
    WindowEntry,
    commit_stamps,
    evaluate_window,
    time_to_drain,
    window_rates,
    worst,
)
from spark_jobs.lag.output import queue_record
from spark_jobs.lag.report import build_window, evaluate, worst_queues
from spark_jobs.lag.snapshot import QueueSnapshot, take_snapshot
from storage import Message, MessageStore, PutResult
from storage.config_managers import (
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from tests.spark_jobs.stores import CONFIG

T0 = 1_720_000_000_000


@dataclass(frozen=True)
class KnownStore:
    store_dir: str
    orders: dict[int, list[PutResult]]
    now: int


@pytest.fixture
def known_store(tmp_path: Path) -> KnownStore:
    """Orders q0: 10 messages, q1: 5; %RETRY%billing q0: 3; %DLQ%billing q0: 2. billing
    committed q0=4 and q1=5, audit only q0=10; ghost is configured but never committed."""
    store_dir = tmp_path / "store"
    orders: dict[int, list[PutResult]] = {0: [], 1: []}
    with MessageStore.open(store_dir, CONFIG) as store:
        for queue_id, count in ((0, 10), (1, 5)):
            for _ in range(count):
                time.sleep(0.002)  # distinct store times
                orders[queue_id].append(
                    store.put_message(Message("Orders", b"x", queue_id=queue_id))
                )
        for _ in range(3):
            store.put_message(Message("%RETRY%billing", b"r"))
        for _ in range(2):
            store.put_message(Message("%DLQ%billing", b"d"))
    offsets = ConsumerOffsetManager(store_dir / "config", now_ms=lambda: T0 + 30_000)
    offsets.commit_offset("billing", "Orders", 0, 4)
    offsets.commit_offset("billing", "Orders", 1, 5)
    offsets.commit_offset("audit", "Orders", 0, 10)
    offsets.persist()
    SubscriptionGroupManager(store_dir / "config").put(SubscriptionGroupConfig("ghost"))
    now = orders[1][-1].store_timestamp + 600_000
    return KnownStore(str(store_dir.resolve()), orders, now)


def rows_by_key(rows: list[QueueSnapshot]) -> dict[tuple[str, str, int], QueueSnapshot]:
    return {(r.group, r.topic, r.queue_id): r for r in rows}


def test_lag_equals_hand_computed_values(known_store: KnownStore) -> None:
    now, orders = known_store.now, known_store.orders
    snapshot = take_snapshot([known_store.store_dir], now)
    rows = rows_by_key(snapshot.queues)
    assert set(rows) == {
        ("billing", "Orders", 0),
        ("billing", "Orders", 1),
        ("billing", "%RETRY%billing", 0),
        ("audit", "Orders", 0),
        ("audit", "Orders", 1),
    }
    q0 = rows[("billing", "Orders", 0)]
    assert (q0.min_offset, q0.max_offset, q0.committed_offset, q0.lag) == (0, 10, 4, 6)
    # The oldest unconsumed message is the one at offset 4.
    assert q0.oldest_unconsumed_ms == orders[0][4].store_timestamp
    assert q0.lag_seconds == (now - orders[0][4].store_timestamp) / 1000
    assert q0.last_commit_ms == T0 + 30_000
    caught_up = rows[("billing", "Orders", 1)]
    assert (caught_up.lag, caught_up.lag_seconds, caught_up.oldest_unconsumed_ms) == (0, 0.0, None)
    never = rows[("audit", "Orders", 1)]
    assert never.never_committed and never.committed_offset == -1
    assert (never.position, never.lag) == (0, 5)
    assert never.lag_seconds == (now - orders[1][0].store_timestamp) / 1000
    assert never.last_commit_ms is None
    retry = rows[("billing", "%RETRY%billing", 0)]
    assert (retry.topic_kind, retry.lag, retry.never_committed) == ("retry", 3, True)
    assert snapshot.dlq_depth == {"billing": 2, "audit": 0, "ghost": 0}
    assert snapshot.groups == {"billing", "audit", "ghost"}


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


# --------------------------------------------------------------------------- Burrow's rules


def entries(
    positions: list[int], lags: list[int], commits: list[int | None] | None = None, step: int = 60
) -> list[WindowEntry]:
    """One entry per minute (snapshot times T0, T0 + 60 s, ...)."""
    commits = commits or [None] * len(positions)
    return [
        WindowEntry(T0 + i * step * 1000, position, lag, position + lag, commit)
        for i, (position, lag, commit) in enumerate(zip(positions, lags, commits, strict=True))
    ]


def minute(i: int) -> int:
    return T0 + i * 60_000


@pytest.mark.parametrize(
    ("window", "now", "status"),
    [
        # Lag 0 now, or anywhere in the window: OK.
        (entries([1, 2, 3], [5, 5, 0]), minute(2), Status.OK),
        (entries([1, 1, 1], [5, 0, 5]), minute(2), Status.OK),
        # A single snapshot is no evidence.
        (entries([1], [5], [minute(-100)]), minute(0), Status.OK),
        # The committed offset went backwards.
        (entries([10, 12, 11], [5, 5, 9]), minute(2), Status.REWIND),
        # Commits stopped: the last one is older than the span of the window's commits.
        (entries([5, 5, 5], [3, 4, 5], [minute(0)] * 3), minute(2), Status.STOP),
        (entries([1, 2, 3], [9, 9, 9], [minute(0), minute(1), minute(2)]), minute(5), Status.STOP),
        # Commits arrive but the offset does not move.
        (entries([5, 5, 5], [3, 4, 5], [minute(0), minute(1), minute(2)]), minute(2), Status.STALL),
        # Offsets move but the lag never shrinks.
        (entries([1, 3, 5], [10, 10, 12]), minute(2), Status.WARN),
        # Offsets move and the lag shrinks at least once.
        (entries([1, 3, 5], [10, 8, 12]), minute(2), Status.OK),
    ],
)
def test_burrow_rules(window: list[WindowEntry], now: int, status: Status) -> None:
    assert evaluate_window(window, now) is status


def test_without_commit_times_an_unmoved_offset_is_a_stop() -> None:
    window = entries([5, 5, 5], [3, 4, 5])
    assert commit_stamps(window) == [minute(0)] * 3
    assert evaluate_window(window, minute(2)) is Status.STOP
    moving = entries([5, 6, 6], [3, 4, 5])
    assert commit_stamps(moving) == [minute(0), minute(1), minute(1)]


def test_group_status_is_the_worst_queue() -> None:
    assert worst([Status.OK, Status.WARN, Status.STOP]) is Status.STOP
    assert worst([Status.STALL, Status.REWIND, Status.STOP]) is Status.REWIND
    assert worst([]) is Status.NOTFOUND
    assert Status.STOP.is_error and not Status.WARN.is_error


def test_rates_and_time_to_drain() -> None:
    window = entries([100, 220], [200, 150])  # 120 consumed, 70 produced in 60 s
    rates = window_rates(window)
    assert rates.consume == 2.0
    assert rates.produce == pytest.approx(70 / 60)
    assert time_to_drain(150, rates) == pytest.approx(150 / (2.0 - 70 / 60))
    assert time_to_drain(0, Rates(None, None)) == 0.0
    assert time_to_drain(10, Rates(1.0, 1.0)) is None
    assert time_to_drain(10, Rates(None, None)) is None
    assert window_rates(window[:1]) == Rates(None, None)


def test_window_building() -> None:
    current = QueueSnapshot(minute(5), "/s", "g", "T", "normal", 0, 0, 50, 40, 10, 1.0, None, None)
    past = [*entries([1, 2, 3, 4], [9, 8, 7, 6]), entries([9], [9])[0]]  # a duplicate time
    window = build_window(past, current, 3)
    assert [e.snapshot_ms for e in window] == [minute(2), minute(3), minute(5)]
    assert window[-1] == WindowEntry(minute(5), 40, 10, 50, None)


def test_pop_groups_show_in_flight_apart_from_lag(known_store: KnownStore) -> None:
    # What the broker's POP service writes: billing's q0 committed at its lowest un-acked
    # offset (4), with 2 of the messages after it received and not acked yet.
    config_dir = Path(known_store.store_dir) / "config"
    save_snapshot(
        config_dir,
        PopSnapshot(
            revive_offset=0,
            committed={("billing", "Orders", 0): 4, ("billing", "Orders", 1): 5},
            in_flight={("billing", "Orders", 0): 2},
        ),
    )
    snapshot = take_snapshot([known_store.store_dir], known_store.now)
    rows = rows_by_key(snapshot.queues)
    q0 = rows[("billing", "Orders", 0)]
    assert (q0.lag, q0.in_flight) == (6, 2)  # lag counts from the lowest un-acked offset
    assert rows[("billing", "Orders", 1)].in_flight == 0
    assert rows[("audit", "Orders", 0)].in_flight == 0
    [queue] = [q for q in evaluate(snapshot, {}).queues if q.snapshot is q0]
    assert queue_record(queue)["in_flight"] == 2

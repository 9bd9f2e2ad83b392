"""snapshot: hand-computed lag of a store with known offsets, POP groups' in-flight counts."""

from __future__ import annotations

from pathlib import Path

from services.pop.state_file import PopSnapshot, save_snapshot
from spark_jobs.lag.output import queue_record
from spark_jobs.lag.report import evaluate
from spark_jobs.lag.snapshot import take_snapshot
from storage import Message, MessageStore
from storage.config_managers import ConsumerOffsetManager
from storage.topic_names import TRACE_TOPIC
from tests.spark_jobs.lag.conftest import T0, KnownStore, rows_by_key
from tests.spark_jobs.stores import CONFIG


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


def test_timer_messages_are_no_lag_until_they_are_delivered(known_store: KnownStore) -> None:
    with MessageStore.open(Path(known_store.store_dir), CONFIG) as store:
        for _ in range(4):  # an hour ahead: waiting in the timer topic, not in Orders
            timed = Message("Orders", b"later", properties={"TIMER_DELAY_SEC": "3600"})
            assert store.put([timed])[0].topic == "rmq_sys_wheel_timer"
    snapshot = take_snapshot([known_store.store_dir], known_store.now)
    rows = rows_by_key(snapshot.queues)
    assert rows[("billing", "Orders", 0)].lag == 6, "as before the timer messages"
    assert rows[("audit", "Orders", 0)].lag == 0
    assert not any(r.topic == "rmq_sys_wheel_timer" for r in snapshot.queues)


def test_a_group_reading_the_trace_topic_gets_no_lag_rows_for_it(known_store: KnownStore) -> None:
    """The broker's message trace is nobody's backlog, even when an admin reads it."""
    store_dir = Path(known_store.store_dir)
    with MessageStore.open(store_dir, CONFIG) as store:
        for _ in range(4):
            store.put([Message(TRACE_TOPIC, b'{"v": 1, "events": []}')])
    offsets = ConsumerOffsetManager(store_dir / "config", now_ms=lambda: T0 + 40_000)
    offsets.load()
    offsets.commit_offset("billing", TRACE_TOPIC, 0, 1)
    offsets.persist()
    snapshot = take_snapshot([known_store.store_dir], known_store.now)
    assert not any(row.topic == TRACE_TOPIC for row in snapshot.queues)
    assert rows_by_key(snapshot.queues)[("billing", "Orders", 0)].lag == 6, "as before"

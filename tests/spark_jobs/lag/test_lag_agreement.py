"""One lag model: the offsets service, the admin pages and the Spark lag job give the same
numbers for the same store, and the same durations."""

from __future__ import annotations

import time
import types
from pathlib import Path

import pytest

from app.admin.lag import group_lag
from app.admin.rendering import templates
from services import Broker, BrokerConfig
from spark_jobs.formatting import format_duration as spark_format_duration
from spark_jobs.lag.snapshot import take_snapshot
from storage import Message, MessageStore, StoreConfig
from storage.config_managers import (
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from storage.durations import format_duration

CONFIG = StoreConfig(commit_log_file_size=256 * 1024, consume_queue_units_per_file=100)
COMMIT_MS = 1_720_000_000_000
# (topic, queue) -> messages; the group's committed offset
QUEUES = {("Orders", 0): 12, ("Orders", 1): 7, ("Orders", 2): 5, ("Audit", 0): 9}
COMMITTED = {("Orders", 0): 3, ("Orders", 1): 7, ("Orders", 2): 50, ("Audit", 0): 0}

Figures = tuple[int, int, int, int, float | None, int]
"""committed, min offset, max offset, lag, lag in seconds, last commit (ms)"""


def build_store(store_dir: Path) -> int:
    """The queues of QUEUES, one message per few ms (every offset has its own store time),
    the group ``billing`` with COMMITTED; returns the last store time."""
    last = 0
    with MessageStore.open(store_dir, CONFIG) as store:
        for (topic, queue_id), count in QUEUES.items():
            for _ in range(count):
                time.sleep(0.002)
                result = store.put([Message(topic, b"x", queue_id=queue_id)])[0]
                last = result.store_timestamp
    offsets = ConsumerOffsetManager(store_dir / "config", now_ms=lambda: COMMIT_MS)
    for (topic, queue_id), offset in COMMITTED.items():
        offsets.commit_offset("billing", topic, queue_id, offset)
    offsets.persist()
    SubscriptionGroupManager(store_dir / "config").put(SubscriptionGroupConfig("billing"))
    return last


@pytest.fixture
def known_store(tmp_path: Path) -> tuple[Path, int]:
    """The store (absolute path) and a "now" 90 s after its last message."""
    store_dir = (tmp_path / "store").resolve()
    return store_dir, build_store(store_dir) + 90_000


async def test_service_admin_and_spark_agree(
    known_store: tuple[Path, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    store_dir, now_ms = known_store
    fixed_clock = types.SimpleNamespace(time_ns=lambda: now_ms * 1_000_000)
    monkeypatch.setattr("services.offsets.time", fixed_clock)
    broker = Broker(BrokerConfig(store_dir, CONFIG))
    await broker.start()
    try:
        service: dict[tuple[str, int], Figures] = {
            (topic_lag.topic, q.queue_id): (
                q.committed_offset,
                q.min_offset,
                q.max_offset,
                q.lag,
                q.lag_seconds,
                q.last_commit_timestamp,
            )
            for topic_lag in broker.offsets.report("billing")
            for q in topic_lag.queues
        }
        admin_lag = group_lag(broker, "billing")
        admin: dict[tuple[str, int], Figures] = {
            (row.topic, row.queue_id): (
                row.committed_offset,
                row.min_offset,
                row.broker_offset,
                row.lag,
                row.lag_seconds,
                row.last_commit_timestamp,
            )
            for row in admin_lag.rows
        }
        service_totals = {t.topic: t.total_lag for t in broker.offsets.report("billing")}
    finally:
        await broker.stop()
    snapshot = take_snapshot([str(store_dir)], now_ms)
    spark: dict[tuple[str, int], Figures] = {
        (row.topic, row.queue_id): (
            row.committed_offset,
            row.min_offset,
            row.max_offset,
            row.lag,
            row.lag_seconds,
            row.last_commit_ms or 0,
        )
        for row in snapshot.queues
        if row.group == "billing"
    }
    assert service == admin == spark
    assert {key: figures[3] for key, figures in spark.items()} == {
        ("Orders", 0): 9,
        ("Orders", 1): 0,
        ("Orders", 2): 0,  # committed past the max offset: no lag
        ("Audit", 0): 9,
    }
    assert spark[("Orders", 1)][4] == spark[("Orders", 2)][4] == 0.0
    assert all(
        seconds is not None and seconds >= 90 for _, _, _, lag, seconds, _ in spark.values() if lag
    )
    assert admin_lag.total_lag == sum(service_totals.values()) == 18
    spark_by_row = {(r.topic, r.queue_id): r for r in snapshot.queues if r.group == "billing"}
    assert spark_by_row[("Orders", 0)].oldest_unconsumed_ms is not None
    assert (
        spark[("Orders", 0)][4]
        == (now_ms - spark_by_row[("Orders", 0)].oldest_unconsumed_ms) / 1000
    )


def test_one_duration_format_for_the_pages_and_the_reports() -> None:
    assert templates.env.filters["duration"] is format_duration
    assert spark_format_duration is format_duration
    assert templates.env.filters["duration"](3 * 3600 + 125) == "3 h 2 min"


def test_dlq_depth_agrees_after_a_redrive(tmp_path: Path) -> None:
    """15 dead letters, 10 redriven: the API, the admin pages and the lag report all say 5."""
    from tests.conftest import start_server, wait_until

    live = start_server(tmp_path / "store")
    try:
        api = live.client()
        for i in range(15):
            sent = api.post("/v1/topics/Orders/messages", json={"body": f"x{i}", "queue_id": 0})
            msg_id = sent.json()["messages"][0]["msg_id"]
            back = {"msg_id": msg_id, "delay_level": -1}
            assert api.post("/v1/groups/billing/retry", json=back).status_code == 200
        dead = api.get("/v1/groups/billing/dlq/messages", params={"limit": 10}).json()
        chosen = [m["msg_id"] for m in dead["messages"]]
        redrive = api.post("/v1/groups/billing/dlq/redrive", json={"msg_ids": chosen})
        assert redrive.json()["summary"]["moved"] == 10
        page = api.get("/v1/groups/billing/dlq/messages").json()
        assert (page["stored"], page["waiting"], page["redriven"]) == (15, 5, 10)
        assert len(page["messages"]) == 5
        groups_page = api.get("/admin/groups", params={"q": "billing"}).text
        assert '<a href="/admin/dlq/billing">5</a>' in groups_page
        # The lag report reads the store files once the offsets are persisted.
        wait_until(
            lambda: (
                take_snapshot([str(live.store_dir)], int(time.time() * 1000)).dlq_depth
                == {"billing": 5}
            )
        )
    finally:
        live.stop()

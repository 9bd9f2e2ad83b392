"""Shared by the lag tests: a store with known offsets, and Burrow windows by the minute."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_jobs.lag.burrow import WindowEntry
from spark_jobs.lag.snapshot import QueueSnapshot
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
                orders[queue_id].append(store.put([Message("Orders", b"x", queue_id=queue_id)])[0])
        for _ in range(3):
            store.put([Message("%RETRY%billing", b"r")])
        for _ in range(2):
            store.put([Message("%DLQ%billing", b"d")])
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

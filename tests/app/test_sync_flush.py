"""SYNC_FLUSH over HTTP: a send is answered once its bytes are on disk (group commit), and
only then can it be pulled."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, start_server


@pytest.fixture(scope="module")
def sync_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("sync"), flush="sync")
    yield live
    live.stop()


def test_concurrent_sends_are_acknowledged_on_disk_and_then_pulled(
    sync_server: LiveServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[int] = []
    real: Callable[[int], None] = os.fdatasync

    def counting(fd: int) -> None:
        syncs.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fdatasync", counting)
    topic = "SyncTopic"

    def send(i: int) -> dict[str, object]:
        with httpx.Client(base_url=sync_server.url, timeout=30) as client:
            response = client.post(
                f"/v1/topics/{topic}/messages", json={"body": f"m{i}", "queue_id": 0}
            )
            assert response.status_code == 201, response.text
            receipt: dict[str, object] = response.json()["messages"][0]
            return receipt

    with ThreadPoolExecutor(max_workers=16) as pool:
        receipts = list(pool.map(send, range(64)))
    assert {r["status"] for r in receipts} == {"PUT_OK"}
    last_end = max(int(str(r["commit_log_offset"])) for r in receipts)
    assert sync_server.call(lambda: sync_server.broker.store_gauges().flushed_offset) > last_end
    assert 0 < len(syncs) < 64, "concurrent sends share flushes"
    bodies: list[str] = []
    with httpx.Client(base_url=sync_server.url, timeout=30) as client:
        offset = 0
        while offset < 64:  # the store returns at most 32 messages a pull, as RocketMQ's
            pulled = client.get(
                f"/v1/topics/{topic}/queues/0/messages",
                params={"max_messages": 100, "offset": offset},
            ).json()
            assert pulled["messages"], pulled
            bodies += [m["body"] for m in pulled["messages"]]
            offset = pulled["next_offset"]
    assert sorted(bodies) == sorted(f"m{i}" for i in range(64))


def test_sync_store_reopens_with_everything_acknowledged(tmp_path: Path) -> None:
    live = start_server(tmp_path / "store", flush="sync")
    try:
        with httpx.Client(base_url=live.url, timeout=30) as client:
            for i in range(20):
                assert (
                    client.post("/v1/topics/Reopen/messages", json={"body": str(i)}).status_code
                    == 201
                )
    finally:
        live.stop()
    assert not (tmp_path / "store" / "abort").exists()
    live = start_server(tmp_path / "store", flush="sync")
    try:
        with httpx.Client(base_url=live.url, timeout=30) as client:
            topic = client.get("/v1/topics/Reopen").json()
            assert sum(q["max_offset"] for q in topic["queues"]) == 20
    finally:
        live.stop()

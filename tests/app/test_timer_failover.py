"""Cluster: timer messages scheduled on a master that is then killed with SIGKILL are
delivered by its promoted slave — each once, none before its time, those that fell due during
the failover at once — and a handle the old master gave out cancels on the new one. The
slave has copied how far the master's wheel fired, and skips what fell due before that. Real etcd,
real ``spoolmq serve`` processes (sync replication), the proxy in front."""

from __future__ import annotations

import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from services.timer.progress_file import load_progress
from tests.app.cluster_support import ClusterBroker
from tests.app.proxy.support import create_topic, start_proxy
from tests.app.test_cluster_failover import is_master
from tests.conftest import wait_until
from tests.etcd_support import start_etcd
from tests.timer_rounds import delivered

TOPIC = "TimedFail"
EARLY = 40  # due before the kill: the old master delivers them
LATE = 260  # due during and after the failover: the new master does
PRECISION = ["--timer-precision-ms", "100"]


def in_sync(master: ClusterBroker, slave: str) -> bool:
    answer = httpx.get(f"{master.url}/v1/topics/{TOPIC}/route", timeout=10)
    groups = {g["group"]: g for g in answer.json()["groups"]} if answer.is_success else {}
    return slave in groups.get("g1", {}).get("in_sync", ())


def copied_read_time(store: Path) -> int:
    progress = load_progress(store / "config")
    return 0 if progress is None else progress.read_time_ms


def schedule(http: httpx.Client, due: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Send each body timed for its due time, fifty to a batch; the receipts by body."""
    receipts: dict[str, dict[str, Any]] = {}
    names = list(due)
    for first in range(0, len(names), 50):
        batch = [{"body": n, "deliver_at": due[n]} for n in names[first : first + 50]]
        answer = http.post(f"/v1/topics/{TOPIC}/messages", json={"messages": batch})
        assert answer.status_code == 201, answer.text
        for name, receipt in zip(names[first : first + 50], answer.json()["messages"], strict=True):
            assert receipt["status"] == "PUT_OK", receipt
            receipts[name] = receipt
    return receipts


def test_timers_of_a_killed_master_are_delivered_once_by_the_new_one(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    a = ClusterBroker("a", tmp_path / "a", etcd.url, extra=PRECISION)
    b = ClusterBroker("b", tmp_path / "b", etcd.url, extra=PRECISION)
    proxy = None
    http = httpx.Client(timeout=40)
    try:
        a.start()
        b.start()
        wait_until(lambda: b.role() == "slave", timeout=30)
        proxy = start_proxy(etcd.url, cluster="test")
        http.base_url = httpx.URL(proxy.url)
        create_topic(http, TOPIC, queues=2)
        wait_until(partial(in_sync, a, "b"), timeout=30)

        now = int(time.time() * 1000)
        due = {f"e{n:03d}": now + 1000 + n * 10 for n in range(EARLY)}
        due |= {f"l{n:03d}": now + 3000 + n * 20 for n in range(LATE)}  # over 3 to 8 s
        due["doomed"] = now + 10_000
        receipts = schedule(http, due)
        with httpx.Client(base_url=a.url, timeout=10) as old:
            wait_until(lambda: len(delivered(old, TOPIC)) >= EARLY, timeout=30)
        # The slave copies how far the wheel fired: its rebuild skips the early ones unread.
        last_early = max(at for name, at in due.items() if name.startswith("e"))
        wait_until(lambda: copied_read_time(tmp_path / "b") > last_early, timeout=30)

        a.kill()
        wait_until(partial(is_master, b), timeout=30)
        # the proxy's route table follows etcd's election a moment later
        wait_until(lambda: http.get("/healthz").json()["masters"] == {"g1": "b"}, timeout=30)
        cancelled = http.delete(f"/v1/topics/{TOPIC}/timers/{receipts['doomed']['timer_handle']}")
        assert cancelled.status_code == 200, cancelled.text
        assert (cancelled.json()["outcome"], cancelled.json()["broker_group"]) == (
            "cancelled",
            "g1",
        )

        expected = set(due) - {"doomed"}
        with httpx.Client(base_url=b.url, timeout=10) as new:
            wait_until(lambda: len(delivered(new, TOPIC)) >= len(expected), timeout=60)
            timers = partial(new.get, "/v1/timers")
            wait_until(lambda: timers().json()["read_time_ms"] > due["doomed"] + 300, timeout=30)
            messages = delivered(new, TOPIC)
        counts = Counter(m["body"] for m in messages)
        assert set(counts) == expected, "none lost, the cancelled one never delivered"
        assert max(counts.values()) == 1, [n for n, c in counts.items() if c > 1][:5]
        for message in messages:
            assert message["store_timestamp"] >= due[message["body"]], "never early"
    finally:
        http.close()
        if proxy is not None:
            proxy.stop()
        b.stop()
        a.stop()
        etcd.stop()

"""Cluster: the master is killed between the half sends and their ends; the new master (its
slave, with sync replication) ends them, and remembers the ends made before the kill."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import httpx

from tests.app.cluster_support import ClusterBroker
from tests.app.test_cluster_failover import is_master
from tests.conftest import wait_until
from tests.etcd_support import start_etcd

PG = {"producer_group": "pg"}


def half(url: str, body: str) -> str:
    answer = httpx.post(
        f"{url}/v1/topics/TxFail/transactions",
        json={**PG, "message": {"body": body, "queue_id": 0}},
        timeout=10,
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["transaction_id"])


def end(url: str, transaction_id: str, how: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/transactions/{transaction_id}/{how}", json=PG, timeout=10)


def test_a_commit_after_a_failover_succeeds_on_the_new_master(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    a = ClusterBroker("a", tmp_path / "a", etcd.url)
    b = ClusterBroker("b", tmp_path / "b", etcd.url)
    try:
        a.start()
        b.start()
        topic = {"read_queue_nums": 1, "write_queue_nums": 1}
        assert httpx.put(f"{a.url}/v1/topics/TxFail", json=topic, timeout=10).status_code in (
            200,
            201,
        )
        wait_until(lambda: b.role() == "slave")
        # The slave copies topics.json every 0.2 s: it knows the topic before the kill.
        wait_until(lambda: httpx.get(f"{b.url}/v1/topics/TxFail", timeout=10).status_code == 200)
        committed, rolled, left_open = half(a.url, "one"), half(a.url, "two"), half(a.url, "three")
        assert end(a.url, committed, "commit").status_code == 200
        assert end(a.url, rolled, "rollback").status_code == 200

        a.kill()
        wait_until(partial(is_master, b), timeout=30)
        ended = end(b.url, left_open, "commit")
        assert ended.status_code == 200, ended.text
        assert ended.json()["repeated"] is False
        again = end(b.url, committed, "commit")
        assert again.status_code == 200 and again.json()["repeated"] is True
        assert end(b.url, rolled, "commit").status_code == 409
        pulled = httpx.get(
            f"{b.url}/v1/topics/TxFail/queues/0/messages", params={"offset": 0}, timeout=10
        )
        assert pulled.status_code == 200, pulled.text
        assert [m["body"] for m in pulled.json()["messages"]] == ["one", "three"]
    finally:
        b.stop()
        a.stop()
        etcd.stop()

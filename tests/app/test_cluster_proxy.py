"""The whole cluster from outside: elected brokers in two groups, the proxy in front, and a
master killed under it. Real etcd, real ``spoolmq serve`` processes, the proxy on uvicorn."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.app.cluster_support import ClusterBroker
from tests.app.proxy.support import ProxyServer, start_proxy
from tests.conftest import wait_until
from tests.etcd_support import EtcdServer, start_etcd


@dataclass
class Deployment:
    etcd: EtcdServer
    g1_a: ClusterBroker
    g1_b: ClusterBroker
    g2_a: ClusterBroker
    proxy: ProxyServer
    http: httpx.Client


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    etcd = start_etcd(tmp_path)
    brokers = [
        ClusterBroker("g1-a", tmp_path / "g1a", etcd.url, group="g1"),
        ClusterBroker("g1-b", tmp_path / "g1b", etcd.url, group="g1"),
        ClusterBroker("g2-a", tmp_path / "g2a", etcd.url, group="g2", replication="async"),
    ]
    proxy: ProxyServer | None = None
    try:
        for broker in brokers:
            broker.start()  # g1-b finds g1's master key held and follows g1-a
        proxy = start_proxy(etcd.url, cluster="test")
        with httpx.Client(base_url=proxy.url, timeout=40) as http:
            yield Deployment(etcd, brokers[0], brokers[1], brokers[2], proxy, http)
    finally:
        if proxy is not None:
            proxy.stop()
        for broker in reversed(brokers):
            broker.stop()
        etcd.stop()


def masters(http: httpx.Client) -> dict[str, str]:
    return dict(http.get("/healthz").json()["masters"])


def test_sends_and_group_pulls_through_the_proxy_survive_a_master_kill(
    deployment: Deployment,
) -> None:
    http = deployment.http
    wait_until(lambda: masters(http) == {"g1": "g1-a", "g2": "g2-a"}, timeout=30)
    created = http.put("/v1/topics/Paid", json={"write_queue_nums": 4, "read_queue_nums": 4})
    assert created.status_code == 201, created.text
    route = http.get("/v1/topics/Paid/route").json()
    assert {q["group"] for q in route["queues"]} == {"g1", "g2"}
    g1_queues = [q["queue_id"] for q in route["queues"] if q["group"] == "g1"]

    def g1_in_sync() -> bool:
        answer = httpx.get(f"{deployment.g1_a.url}/v1/topics/Paid/route", timeout=10)
        groups = {g["group"]: g for g in answer.json()["groups"]} if answer.is_success else {}
        return "g1-b" in groups.get("g1", {}).get("in_sync", ())

    wait_until(g1_in_sync, timeout=30)
    acknowledged: set[str] = set()
    for i in range(40):
        answer = http.post("/v1/topics/Paid/messages", json={"body": f"before-{i}"})
        assert answer.status_code == 201, answer.text
        receipt = answer.json()["messages"][0]
        assert receipt["status"] == "PUT_OK", receipt
        acknowledged.add(f"before-{i}")
    assert g1_queues[0] in {
        q["queue_id"] for q in http.get("/v1/groups/Audit/topics/Paid/messages").json()["queues"]
    }

    deployment.g1_a.kill()  # kill -9: g1's lease has to lapse
    # A send to one of g1's queues is refused (503, Retry-After) until g1-b is elected ...
    first_ok = None
    for attempt in range(300):
        answer = http.post(
            "/v1/topics/Paid/messages", json={"body": "after", "queue_id": g1_queues[0]}
        )
        if answer.status_code == 201:
            first_ok = attempt
            break
        assert answer.status_code in (421, 503), answer.text
        if answer.status_code == 503:
            assert "retry-after" in answer.headers
        time.sleep(0.1)
    assert first_ok is not None, "no master for g1 after the kill"
    acknowledged.add("after")
    assert masters(http)["g1"] == "g1-b"
    # ... while sends that name no queue keep going (to whichever group has a master)
    for i in range(20):
        answer = http.post("/v1/topics/Paid/messages", json={"body": f"later-{i}"})
        assert answer.status_code == 201, answer.text
        acknowledged.add(f"later-{i}")

    seen: list[str] = []
    for _ in range(100):
        pulled = http.get("/v1/groups/Billing/topics/Paid/messages", params={"max_messages": 16})
        assert pulled.status_code == 200, pulled.text
        answer_body = pulled.json()
        if not answer_body["messages"]:
            break
        seen.extend(m["body"] for m in answer_body["messages"])
        commits = [
            {"topic": q["topic"], "queue_id": q["queue_id"], "offset": q["next_offset"]}
            for q in answer_body["queues"]
            if q["next_offset"] > q["offset"]
        ]
        assert http.post("/v1/groups/Billing/offsets", json={"offsets": commits}).is_success
    assert len(seen) == len(set(seen)), "a message was delivered twice"
    assert set(seen) == acknowledged

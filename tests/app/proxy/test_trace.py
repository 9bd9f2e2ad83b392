"""Message trace through the proxy (:mod:`app.proxy.trace`): every broker group is asked and
the timelines merged -- each event once, in time order, each consumer group's latest state.

The merging is checked on answers made by hand (a message whose retries and dead letter live
in another group than the message); the lookup on real brokers: two groups in one process,
and spoolmq serve processes with g1's master killed (-9), where the lookup after the failover
still returns the whole timeline from the new master.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.proxy.trace import merged_events, merged_groups, merged_timeline
from tests.app.cluster_support import ClusterBroker
from tests.app.proxy.support import Cluster, create_topic, is_problem, start_proxy, two_groups
from tests.conftest import wait_until
from tests.etcd_support import start_etcd

MSG = "0A0000010000000000000000000000AA"


def ev(kind: str, at: int, group: str | None = None, attempt: int | None = None,
       topic: str = "Orders") -> dict[str, Any]:  # fmt: skip
    return {"type": kind, "at": at, "msg_id": MSG, "topic": topic, "queue_id": 0,
            "queue_offset": 3, "group": group, "attempt": attempt, "consumer": None,
            "detail": {}}  # fmt: skip


OWN = {  # the group that stored the message: its first delivery and nack
    "msg_id": MSG,
    "topic": "Orders",
    "events": [ev("stored", 100), ev("delivered", 150, "audit", 1), ev("nacked", 160, "audit", 1)],
    "groups": [
        {"group": "audit", "state": "retrying", "gap": None},
        {"group": "billing", "state": "waiting", "gap": "stored 00:00:00.100, not yet ..."},
    ],
    "tracing": "on",
}
RETRIES = {  # the group holding %RETRY%audit: the retry, acked; and the nack again (a replica)
    "msg_id": MSG,
    "topic": "Orders",
    "events": [
        ev("nacked", 160, "audit", 1),
        ev("delivered", 160, "audit", 2, "%RETRY%audit"),
        ev("acked", 190, "audit", 2, "%RETRY%audit"),
    ],
    "groups": [{"group": "audit", "state": "acked", "gap": None}],
    "tracing": "on",
}


def test_each_event_once_in_time_order_with_each_brokers_order_kept() -> None:
    events = merged_events([RETRIES, OWN])
    assert [(e["type"], e["at"], e["attempt"]) for e in events] == [
        ("stored", 100, None),
        ("delivered", 150, 1),
        ("nacked", 160, 1),
        ("delivered", 160, 2),
        ("acked", 190, 2),
    ]


def test_a_groups_state_is_that_of_the_broker_that_saw_its_latest_step() -> None:
    groups = merged_groups([OWN, RETRIES])
    assert groups == [
        {"group": "audit", "state": "acked", "gap": None},
        OWN["groups"][1],  # only its own broker knows billing: its gap stays
    ]


def test_the_answer_names_the_message_from_the_group_that_stored_it() -> None:
    copy_only = {**RETRIES, "topic": "%RETRY%audit", "tracing": "off"}
    merged = merged_timeline([copy_only, OWN])
    assert merged["topic"] == "Orders" and merged["tracing"] == "on"
    assert len(merged["events"]) == 5


# ================================================================ real brokers


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path, trace=True)


def pull_and_commit(http: httpx.Client, group: str, topic: str) -> list[dict[str, Any]]:
    """One group pull through the proxy, its offsets committed."""
    pulled = http.get(f"/v1/groups/{group}/topics/{topic}/messages", params={"max_messages": 32})
    assert pulled.status_code == 200, pulled.text
    answer = pulled.json()
    commits = [
        {"topic": q["topic"], "queue_id": q["queue_id"], "offset": q["next_offset"]}
        for q in answer["queues"]
        if q["next_offset"] > q["offset"]
    ]
    assert http.post(f"/v1/groups/{group}/offsets", json={"offsets": commits}).is_success
    return list(answer["messages"])


def traced(http: httpx.Client, msg_id: str, *types: str) -> dict[str, Any] | None:
    """The proxy's timeline once it holds these event types, else None."""
    answer = http.get(f"/v1/messages/{msg_id}/trace")
    if answer.status_code != 200:
        return None
    timeline: dict[str, Any] = answer.json()
    found = [e["type"] for e in timeline["events"]]
    return timeline if all(t in found for t in types) else None


def has_steps(http: httpx.Client, msg_id: str) -> bool:
    return traced(http, msg_id, "stored", "delivered", "acked") is not None


def test_a_lookup_through_the_proxy_asks_every_group(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Orders", queues=4)
    sent = [
        http.post(
            "/v1/topics/Orders/messages",
            json={"body": f"o{q}", "queue_id": q, "keys": [f"order-{q}"]},
        )
        for q in (0, 3)  # one in g1, one in g2
    ]
    receipts = [answer.json()["messages"][0] for answer in sent]
    assert len(pull_and_commit(http, "billing", "Orders")) == 2
    for receipt in receipts:
        uniq_key: str = receipt["uniq_key"]  # the id trace events name the message by
        wait_until(functools.partial(has_steps, http, uniq_key), timeout=30)
        timeline = traced(http, uniq_key, "stored", "delivered", "acked")
        assert timeline is not None and timeline["msg_id"] == uniq_key
        assert [e["type"] for e in timeline["events"]] == ["stored", "delivered", "acked"]
        assert timeline["groups"] == [{"group": "billing", "state": "acked", "gap": None}]
    # An offsetMsgId is found where it is stored, then every group is asked by the UNIQ_KEY.
    # (Both brokers here store at offset 0 under one store host: g1, asked first, answers.)
    first = traced(http, receipts[0]["msg_id"], "stored")
    assert first == traced(http, receipts[0]["uniq_key"], "stored")
    by_key = http.get("/v1/messages/trace", params={"key": "order-3"})
    assert by_key.status_code == 200, by_key.text
    assert by_key.json()["msg_id"] == receipts[1]["uniq_key"]
    is_problem(http.get(f"/v1/messages/{'AB' * 16}/trace"), 404, "MESSAGE_NOT_FOUND")
    is_problem(http.get("/v1/messages/trace", params={"key": "nobody"}), 404, "MESSAGE_NOT_FOUND")
    assert http.get("/v1/messages/not-hex/trace").status_code == 400


def test_after_a_failover_one_lookup_returns_the_whole_timeline(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    brokers = [
        ClusterBroker("g1-a", tmp_path / "g1a", etcd.url, group="g1", extra=["--trace"]),
        ClusterBroker("g1-b", tmp_path / "g1b", etcd.url, group="g1", extra=["--trace"]),
        ClusterBroker("g2-a", tmp_path / "g2a", etcd.url, group="g2", extra=["--trace"]),
    ]
    started: list[ClusterBroker] = []
    proxy = None
    try:
        for broker in brokers:
            started.append(broker.start())
        proxy = start_proxy(etcd.url, cluster="test")
        with httpx.Client(base_url=proxy.url, timeout=40) as http:
            run_failover(http, brokers[0], brokers[1])
    finally:
        if proxy is not None:
            proxy.stop()
        for broker in reversed(started):
            broker.stop()
        etcd.stop()


def masters(http: httpx.Client) -> dict[str, str]:
    return dict(http.get("/healthz").json()["masters"])


def run_failover(http: httpx.Client, old: ClusterBroker, new: ClusterBroker) -> None:
    wait_until(lambda: masters(http) == {"g1": "g1-a", "g2": "g2-a"}, timeout=60)
    create_topic(http, "Paid", queues=4)
    sent = http.post("/v1/topics/Paid/messages", json={"body": "paid", "queue_id": 0})
    assert sent.status_code == 201, sent.text
    msg_id = sent.json()["messages"][0]["msg_id"]
    assert [m["msg_id"] for m in pull_and_commit(http, "billing", "Paid")] == [msg_id]
    wait_until(lambda: has_steps(http, msg_id), timeout=30)
    before = traced(http, msg_id, "stored", "delivered", "acked")
    assert before is not None

    def replica_has_it() -> bool:  # the trace records reached g1-b (sync replication)
        answer = httpx.get(f"{new.url}/v1/messages/{msg_id}/trace", timeout=10)
        return answer.status_code == 200 and len(answer.json()["events"]) == 3

    wait_until(replica_has_it, timeout=30)
    old.kill()  # kill -9: g1's lease has to lapse
    wait_until(lambda: masters(http).get("g1") == "g1-b", timeout=60)
    deadline = time.monotonic() + 30
    after = traced(http, msg_id, "stored", "delivered", "acked")
    while after is None and time.monotonic() < deadline:
        time.sleep(0.1)
        after = traced(http, msg_id, "stored", "delivered", "acked")
    assert after is not None, "the timeline is gone after the failover"
    assert after["events"] == before["events"]
    assert [g["group"] for g in after["groups"]] == ["billing"]

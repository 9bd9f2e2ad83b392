"""Transactions through the proxy (:mod:`app.proxy.transactions`): a half send lands in the
group of its queue, and its end, its state and its check answers go back to that group, in
the cluster's terms (transaction ids that name their group, cluster-wide queue ids)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.app.proxy.support import BadBroker, Cluster, create_topic, g2_is, is_problem, two_groups

Json = dict[str, Any]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(
        tmp_path, transaction_timeout_ms=100, transaction_check_interval_ms=60_000
    )


def half(http: httpx.Client, topic: str, queue_id: int) -> Json:
    answer = http.post(
        f"/v1/topics/{topic}/transactions",
        json={"producer_group": "pg", "message": {"body": f"q{queue_id}", "queue_id": queue_id}},
    )
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def end(http: httpx.Client, transaction_id: str, how: str) -> httpx.Response:
    return http.post(f"/v1/transactions/{transaction_id}/{how}", json={"producer_group": "pg"})


def test_ends_and_checks_reach_the_group_holding_the_half(cluster: Cluster) -> None:
    http = cluster.http
    route = create_topic(http, "TxProxied")
    groups = {q["queue_id"]: q["group"] for q in route["queues"]}
    assert set(groups.values()) == {"g1", "g2"}
    sent = {queue_id: half(http, "TxProxied", queue_id) for queue_id in sorted(groups)}
    for queue_id, answer in sent.items():
        assert answer["broker_group"] == groups[queue_id]
        assert answer["queue_id"] == queue_id  # cluster-wide
        assert answer["transaction_id"].startswith(f"{groups[queue_id]}~")

    committed = {q for q in sent if q % 2 == 0}
    for queue_id, answer in sent.items():
        if queue_id in committed:
            ended = end(http, answer["transaction_id"], "commit")
            assert ended.status_code == 200, ended.text
            assert ended.json()["message"]["queue_id"] == queue_id
        else:
            assert end(http, answer["transaction_id"], "rollback").status_code == 200
    again = end(http, sent[0]["transaction_id"], "commit").json()
    assert again["repeated"] is True
    assert end(http, sent[1]["transaction_id"], "commit").status_code == 409

    bodies = set()
    for queue_id in groups:
        pulled = http.get(f"/v1/topics/TxProxied/queues/{queue_id}/messages", params={"offset": 0})
        bodies |= {m["body"] for m in pulled.json()["messages"]}
    assert bodies == {f"q{q}" for q in committed}

    # One open transaction per group: each group's check comes through one poll.
    one_queue = {g: q for q, g in groups.items()}
    left = {g: half(http, "TxProxied", q) for g, q in one_queue.items()}
    seen: set[str] = set()
    while len(seen) < 2:
        polled = http.post(
            # A check leased to a long-poll the proxy cancels comes back after its lease.
            "/v1/producer-groups/pg/transaction-checks",
            json={"wait_ms": 10_000, "lease_ms": 1000},
        ).json()["checks"]
        assert polled, "no check came within the long-poll"
        seen |= {c["transaction_id"] for c in polled}
    assert seen == {t["transaction_id"] for t in left.values()}
    for transaction in left.values():
        state = http.get(f"/v1/transactions/{transaction['transaction_id']}").json()
        assert state["state"] == "open" and state["checks"] == 1
        assert end(http, transaction["transaction_id"], "rollback").status_code == 200
    listed = http.get("/v1/transactions").json()["transactions"]
    assert listed == []
    unknown = end(http, "g9~nothing", "commit")
    assert unknown.status_code == 404


def test_a_half_send_naming_its_queue_wrongly_is_refused_not_placed_elsewhere(
    cluster: Cluster,
) -> None:
    """As a send's: the broker would refuse these, so the proxy must not replace them."""
    http = cluster.http
    create_topic(http, "HalfMistakes", 4)
    for named in ({"queue_id": "2"}, {"queue_id": True}, {"queue_id": -1}, {"sharding_key": 5}):
        message = {"body": "x", **named}
        answer = http.post(
            "/v1/topics/HalfMistakes/transactions",
            json={"producer_group": "P", "message": message},
        )
        assert answer.status_code == 422, (named, answer.status_code, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
    deep = b'{"producer_group":"P","message":{"body":"x"},"x":%s%s}' % (b"[" * 300, b"]" * 300)
    too_deep = http.post(
        "/v1/topics/HalfMistakes/transactions",
        content=deep,
        headers={"content-type": "application/json"},
    )
    is_problem(too_deep, 422, "VALIDATION_FAILED")
    assert http.get("/v1/transactions").json()["transactions"] == []


def test_a_half_send_that_may_have_been_written_is_an_unknown_outcome(cluster: Cluster) -> None:
    """Not 503 with Retry-After: the proxy does not send it again (a second half is a second
    transaction), and neither should its client — if it was stored, the broker's check-back
    asks the producer group."""
    create_topic(cluster.http, "HalfUnsure", 4)  # queues 2, 3 on g2
    bad = BadBroker("hang_up")
    with g2_is(cluster, bad) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        answer = http.post(
            "/v1/topics/HalfUnsure/transactions",
            json={"producer_group": "pg", "message": {"body": "x", "queue_id": 3}},
        )
    is_problem(answer, 504, "OUTCOME_UNKNOWN")
    assert "retry-after" not in answer.headers
    assert len(bad.keys) == 1  # tried once


def test_a_transaction_id_the_proxy_did_not_answer_is_not_found(cluster: Cluster) -> None:
    http = cluster.http
    for transaction_id in ("plain", "g9~x", "~x"):
        is_problem(http.get(f"/v1/transactions/{transaction_id}"), 404, "TRANSACTION_NOT_FOUND")
        ended = http.post(
            f"/v1/transactions/{transaction_id}/commit", json={"producer_group": "pg"}
        )
        is_problem(ended, 404, "TRANSACTION_NOT_FOUND")

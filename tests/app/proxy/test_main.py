"""The proxy app (:mod:`app.proxy.main`) as ``spoolmq proxy`` serves it: its route table from
etcd (and what it does while etcd is away), the HTTP shell every answer passes through
(request ids, problem answers), and its hot operations served straight from their endpoints."""

from __future__ import annotations

from tests.app.proxy.support import Cluster, create_topic, is_problem, send


def test_with_etcd_down_the_proxy_keeps_routing_on_its_last_view(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Kept", 4)
    cluster.etcd.stop()
    assert send(http, "Kept", "still routed", queue_id=3)["queue_id"] == 3
    assert http.get("/v1/topics/Kept/queues/3/messages").json()["messages"][0]["body"] == (
        "still routed"
    )
    refused = http.put("/v1/topics/New", json={"write_queue_nums": 2})
    is_problem(refused, 503, "ETCD_UNAVAILABLE")
    assert refused.headers["retry-after"] == "1"


def test_every_answer_carries_the_request_id_the_broker_saw(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Ids", 4)
    sent = http.post("/v1/topics/Ids/messages", json={"body": "x"}, headers={"X-Request-Id": "r-1"})
    assert (sent.status_code, sent.headers["x-request-id"]) == (201, "r-1")
    made = http.post("/v1/topics/Ids/messages", json={"body": "y"})
    assert made.status_code == 201 and len(made.headers["x-request-id"]) >= 16
    assert http.get("/healthz").headers["x-request-id"]
    own = is_problem(http.get("/v1/topics/Nope/route"), 404, "TOPIC_NOT_FOUND")
    assert own["instance"] == "/v1/topics/Nope/route"
    # The broker's own problem passes through, and names the id the proxy answered with:
    # the proxy gave it to the broker.
    for headers in ({}, {"X-Request-Id": "client-chosen-7"}):
        refused = http.get("/v1/topics/Ids/queues/3/messages?max_messages=0", headers=headers)
        is_problem(refused, 422, "VALIDATION_FAILED")
    assert refused.headers["x-request-id"] == "client-chosen-7"
    group = http.get(
        "/v1/groups/G/topics/Ids/messages?max_messages=0", headers={"X-Request-Id": "gp-1"}
    )
    assert is_problem(group, 422, "VALIDATION_FAILED")["request_id"] == "gp-1"
    pop = http.post(
        "/v1/groups/G/topics/Ids/receive",
        json={"max_messages": 0},
        headers={"X-Request-Id": "rc-1"},
    )
    assert is_problem(pop, 422, "VALIDATION_FAILED")["request_id"] == "rc-1"

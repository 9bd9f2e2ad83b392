"""Topics through the proxy (:mod:`app.proxy.topics`): a topic spread over the broker groups and
its route kept, its queues and offsets read across groups in the cluster's terms, the topic
list, and the proxy's health."""

from __future__ import annotations

from typing import Any

import httpx

from tests.app.proxy.support import (
    Cluster,
    create_topic,
    local_queue_counts,
    send,
    start_proxy,
)


def test_a_topic_is_spread_over_the_groups_and_created_on_each(cluster: Cluster) -> None:
    http = cluster.http
    route = create_topic(http, "Orders")
    assert [(q["queue_id"], q["group"], q["local_queue_id"]) for q in route["queues"]] == [
        (0, "g1", 0), (1, "g1", 1), (2, "g1", 2), (3, "g1", 3),
        (4, "g2", 0), (5, "g2", 1), (6, "g2", 2), (7, "g2", 3),
    ]  # fmt: skip
    assert http.get("/v1/topics/Orders/route").json() == route
    for live in (cluster.a, cluster.b):
        assert local_queue_counts(live, "Orders") == {0: 0, 1: 0, 2: 0, 3: 0}
    assert "Orders" in http.get("/healthz").json()["topics"]


def test_a_topic_keeps_its_route_once_created(cluster: Cluster) -> None:
    http = cluster.http
    first = create_topic(http, "Kept", 4)
    again = http.put("/v1/topics/Kept", json={"write_queue_nums": 4})
    assert again.status_code == 200, again.text
    assert again.json()["queues"] == first["queues"]
    for changed in ({"write_queue_nums": 6}, {"write_queue_nums": 4, "groups": ["g1"]}):
        refused = http.put("/v1/topics/Kept", json=changed)
        assert refused.status_code == 409, refused.text
        assert refused.json()["code"] == "ROUTE_CONFLICT"
    assert http.get("/v1/topics/Kept/route").json()["queues"] == first["queues"]


def test_a_topic_asked_for_wrongly_is_a_problem_and_a_brokers_refusal_passes_through(
    cluster: Cluster,
) -> None:
    http = cluster.http
    invalid: list[dict[str, Any]] = [
        {"groups": ["g1", "nope"]},
        {"groups": []},
        {"groups": "g1"},
        {"write_queue_nums": 10**9},
        {"write_queue_nums": True},
    ]
    for bad in invalid:
        refused = http.put("/v1/topics/Bad", json=bad)
        assert (refused.status_code, refused.json()["code"]) == (422, "VALIDATION_FAILED"), bad
    unknown = http.put("/v1/topics/Bad", json={"groups": ["g1", "nope"]}).json()["detail"]
    assert "nope in cluster 'c1' (its groups: g1, g2)" in unknown
    bad_name = http.put("/v1/topics/bad%20name", json={})  # the broker's own refusal
    assert (bad_name.status_code, bad_name.json()["code"]) == (400, "INVALID_TOPIC_NAME")
    for name in ("Bad", "bad%20name"):
        assert http.get(f"/v1/topics/{name}/route").status_code == 404
    # A name the broker accepts reaches it as it was sent: "%" is one of its characters.
    percent = http.put("/v1/topics/50%25off", json={"write_queue_nums": 2})
    assert percent.status_code == 201, percent.text
    assert httpx.get(f"{cluster.a.url}/v1/topics/50%25off", timeout=10).json()["topic"] == "50%off"
    assert http.get("/v1/topics/Nope").json()["code"] == "TOPIC_NOT_FOUND"


def test_a_proxy_of_a_cluster_nobody_joined_says_to_check_its_name(cluster: Cluster) -> None:
    proxy = start_proxy(cluster.etcd.url, cluster="demo")  # the brokers joined "c1"
    try:
        answer = httpx.put(f"{proxy.url}/v1/topics/T", json={"groups": ["g1"]}, timeout=10)
        assert answer.status_code == 422
        assert "cluster 'demo' (no broker has joined it" in answer.json()["detail"]
        assert "--cluster" in answer.json()["detail"]
    finally:
        proxy.stop()


def test_a_topic_answers_every_queue_with_cluster_wide_ids_and_its_group(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Stats", 4)  # g1 hosts 0, 1; g2 hosts 2, 3 (its own 0, 1)
    for queue_id, count in ((0, 2), (2, 1), (3, 3)):
        for i in range(count):
            send(http, "Stats", f"s{queue_id}-{i}", queue_id=queue_id)

    detail = http.get("/v1/topics/Stats")
    assert detail.status_code == 200, detail.text
    body = detail.json()
    assert (body["topic"], body["read_queue_nums"], body["write_queue_nums"]) == ("Stats", 4, 4)
    queues = [
        (q["queue_id"], q["broker_group"], q["min_offset"], q["max_offset"]) for q in body["queues"]
    ]
    assert queues == [(0, "g1", 0, 2), (1, "g1", 0, 0), (2, "g2", 0, 1), (3, "g2", 0, 3)]

    seek = http.get(
        "/v1/topics/Stats/queues/3/offset", params={"timestamp": 0, "boundary": "lower"}
    )
    assert seek.status_code == 200, seek.text
    assert (seek.json()["queue_id"], seek.json()["offset"], seek.json()["max_offset"]) == (3, 0, 3)
    assert (
        http.get("/v1/topics/Stats/queues/9/offset", params={"timestamp": 0}).json()["code"]
        == "QUEUE_NOT_FOUND"
    )


def test_a_group_that_does_not_answer_makes_the_topic_503_not_a_shorter_list(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Partial", 4)
    cluster.b.stop()
    down = http.get("/v1/topics/Partial")
    assert down.status_code == 503, down.text
    assert down.json()["code"] == "BROKER_UNAVAILABLE"
    assert down.headers["retry-after"] == "1"
    # the offsets of g1's queues still answer
    assert http.get("/v1/topics/Partial/queues/0/offset", params={"timestamp": 0}).is_success


def test_the_topic_list_is_paged_with_cluster_wide_queue_counts(cluster: Cluster) -> None:
    http = cluster.http
    for name, queues in (("ListA", 4), ("ListB", 2), ("ListC", 8)):
        create_topic(http, name, queues)
    first = http.get("/v1/topics", params={"limit": 2})
    assert first.status_code == 200, first.text
    page = first.json()
    assert [t["topic"] for t in page["topics"]] == ["ListA", "ListB"]
    assert (page["total"], page["next_after"]) == (3, "ListB")
    rest = http.get("/v1/topics", params={"limit": 2, "after": "ListB"}).json()
    assert ([t["topic"] for t in rest["topics"]], rest["next_after"]) == (["ListC"], None)
    counts = {
        t["topic"]: (t["read_queue_nums"], t["write_queue_nums"], t["system"])
        for t in page["topics"] + rest["topics"]
    }
    assert counts == {"ListA": (4, 4, False), "ListB": (2, 2, False), "ListC": (8, 8, False)}


def test_a_list_limit_that_is_no_whole_number_is_a_client_error(cluster: Cluster) -> None:
    http = cluster.http
    for limit in ("²", "1²", "x", "0", "-1", "1001"):  # "²".isdigit(), but int("²") fails
        answer = http.get("/v1/topics", params={"limit": limit})
        assert (answer.status_code, answer.json()["code"]) == (422, "VALIDATION_FAILED"), limit


def test_health_names_the_masters_slaves_and_topics_the_proxy_follows(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Healthy", 2)
    health = http.get("/healthz").json()
    assert (health["status"], health["cluster"]) == ("ok", "c1")
    assert health["masters"] == {"g1": "a", "g2": "b"}
    assert health["slaves"] == {"g1": [], "g2": []}
    assert health["topics"] == ["Healthy"]
    assert health["revision"] > 0

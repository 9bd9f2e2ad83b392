"""SQL92 filters through the proxy: passed on to every broker group a request reaches — a pull
of one cluster-wide queue, a group pull and a POP receive over both groups, a group's stored
subscription — and a filter that does not parse refused as the broker refuses it."""

from __future__ import annotations

from typing import Any

import httpx

from tests.app.proxy.support import Cluster, create_topic

EU = "region = 'eu'"


def send_regions(http: httpx.Client, topic: str, queue_id: int, tag: str) -> None:
    """Four messages into one cluster-wide queue: regions eu, us, eu, ap."""
    messages = [
        {"body": f"{tag}-{i}", "properties": {"region": region}}
        for i, region in enumerate(["eu", "us", "eu", "ap"])
    ]
    answer = http.post(
        f"/v1/topics/{topic}/messages", json={"messages": messages, "queue_id": queue_id}
    )
    assert answer.status_code == 201, answer.text


def bodies(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return sorted(m["body"] for m in found["messages"])


def test_filters_reach_every_group_a_request_reaches(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Regions", 4)  # queues 0-1 on g1, 2-3 on g2
    send_regions(http, "Regions", 0, "g1")
    send_regions(http, "Regions", 3, "g2")
    one_queue = http.get("/v1/topics/Regions/queues/3/messages", params={"filter": EU})
    assert bodies(one_queue) == ["g2-0", "g2-2"]
    grouped = http.get(
        "/v1/groups/Readers/topics/Regions/messages", params={"filter": EU, "max_messages": 32}
    )
    assert bodies(grouped) == ["g1-0", "g1-2", "g2-0", "g2-2"]
    received = http.post(
        "/v1/groups/Poppers/topics/Regions/receive",
        json={"filter": "region = 'ap'", "max_messages": 16},
    )
    assert bodies(received) == ["g1-3", "g2-3"]


def test_a_group_subscription_set_through_the_proxy_applies_in_every_group(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Subscribed", 4)
    send_regions(http, "Subscribed", 1, "g1")
    send_regions(http, "Subscribed", 2, "g2")
    stored = http.put("/v1/groups/Subscribers", json={"filters": {"Subscribed": "region <> 'eu'"}})
    assert stored.status_code in (200, 201), stored.text
    answer = http.get(
        "/v1/groups/Subscribers/topics/Subscribed/messages", params={"max_messages": 32}
    )
    assert bodies(answer) == ["g1-1", "g1-3", "g2-1", "g2-3"]


def test_a_filter_that_does_not_parse_is_refused_through_the_proxy(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Refused", 4)
    for answer in (
        http.get("/v1/topics/Refused/queues/2/messages", params={"filter": "a = 'x' b"}),
        http.get("/v1/groups/G/topics/Refused/messages", params={"filter": "a = 'x' b"}),
        http.post("/v1/groups/P/topics/Refused/receive", json={"filter": "a = 'x' b"}),
    ):
        assert answer.status_code == 400, answer.text
        assert answer.json()["code"] == "INVALID_FILTER"
        assert "position 8" in answer.json()["detail"]

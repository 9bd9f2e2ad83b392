"""SQL92 property filters over HTTP: a queue pull, a group pull and a POP receive return
exactly the matching messages, move their offsets past the others, filter retries too, wake a
long poll for a matching arrival, and refuse a filter that does not parse with the place."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

REGIONS = ["eu", "us", "eu", "ap", "us", "eu", "ap", "eu"]
EU = "region = 'eu' AND amount >= 2"


def send_orders(client: httpx.Client, topic: str, queue_id: int | None = 0) -> None:
    """Eight messages; message i has region REGIONS[i] and amount i (the body says i)."""
    messages = [
        {"body": f"order-{i}", "properties": {"region": r, "amount": str(i)}}
        for i, r in enumerate(REGIONS)
    ]
    batch: dict[str, Any] = {"messages": messages}
    if queue_id is not None:
        batch["queue_id"] = queue_id
    answer = client.post(f"/v1/topics/{topic}/messages", json=batch)
    assert answer.status_code == 201, answer.text


def create_topic(client: httpx.Client, topic: str, queues: int = 1) -> None:
    answer = client.put(
        f"/v1/topics/{topic}", json={"write_queue_nums": queues, "read_queue_nums": queues}
    )
    assert answer.status_code in (200, 201), answer.text


def bodies(answer: dict[str, Any]) -> list[str]:
    return [m["body"] for m in answer["messages"]]


def test_a_queue_pull_returns_the_matching_messages_and_moves_past_the_rest(
    client: httpx.Client, topic: str
) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    pulled = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"filter": EU})
    assert pulled.status_code == 200, pulled.text
    answer = pulled.json()
    assert bodies(answer) == ["order-2", "order-5", "order-7"]
    assert answer["next_offset"] == 8
    # nothing matches from offset 4 on: the pull says so and moves on
    narrow: dict[str, str | int] = {"filter": "region = 'ap' AND amount < 4", "offset": 4}
    none = client.get(f"/v1/topics/{topic}/queues/0/messages", params=narrow).json()
    assert none["messages"] == [] and none["status"] == "NO_MATCHED_MESSAGE"
    assert none["next_offset"] == 8


def test_tags_and_a_filter_both_apply(client: httpx.Client, topic: str) -> None:
    create_topic(client, topic)
    messages = [
        {"body": "a-eu", "tags": "A", "properties": {"region": "eu"}},
        {"body": "b-eu", "tags": "B", "properties": {"region": "eu"}},
        {"body": "a-us", "tags": "A", "properties": {"region": "us"}},
    ]
    client.post(f"/v1/topics/{topic}/messages", json={"messages": messages, "queue_id": 0})
    params = {"tags": "A", "filter": "region = 'eu'"}
    answer = client.get(f"/v1/topics/{topic}/queues/0/messages", params=params).json()
    assert bodies(answer) == ["a-eu"]
    by_tag = {"filter": "TAGS = 'B' OR region = 'us'"}
    answer = client.get(f"/v1/topics/{topic}/queues/0/messages", params=by_tag).json()
    assert bodies(answer) == ["b-eu", "a-us"]


def test_a_group_pull_filters_every_queue_and_its_retries(
    client: httpx.Client, topic: str, group: str
) -> None:
    create_topic(client, topic, queues=2)
    send_orders(client, topic, queue_id=0)
    send_orders(client, topic, queue_id=1)
    params: dict[str, Any] = {"filter": EU, "max_messages": 32, "auto_commit": "true"}
    first = client.get(f"/v1/groups/{group}/topics/{topic}/messages", params=params).json()
    assert sorted(bodies(first)) == sorted(["order-2", "order-5", "order-7"] * 2)
    assert {q["queue_id"]: q["next_offset"] for q in first["queues"]} == {0: 8, 1: 8}
    # a matching message and one that does not match, both sent back to retry: only the
    # matching one comes back (a retry carries its properties)
    matching = first["messages"][0]
    plain = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"offset": 0}).json()
    other = plain["messages"][0]  # order-0: amount 0
    for message in (other, matching):
        back = client.post(
            f"/v1/groups/{group}/retry", json={"msg_id": message["msg_id"], "delay_level": 1}
        )
        assert back.status_code in (200, 201), back.text
    params["wait_ms"] = 5000
    found: list[str] = []
    deadline = time.monotonic() + 30
    while not found and time.monotonic() < deadline:
        answer = client.get(f"/v1/groups/{group}/topics/{topic}/messages", params=params)
        found = bodies(answer.json())
    assert found == [matching["body"]]
    params["wait_ms"] = 1500
    later = client.get(f"/v1/groups/{group}/topics/{topic}/messages", params=params).json()
    assert later["messages"] == []


def test_a_pop_receive_never_hands_out_a_message_that_does_not_match(
    client: httpx.Client, topic: str, group: str
) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    body = {"max_messages": 16, "filter": EU, "invisible_ms": 60_000}
    received = client.post(f"/v1/groups/{group}/topics/{topic}/receive", json=body)
    assert received.status_code == 200, received.text
    assert bodies(received.json()) == ["order-2", "order-5", "order-7"]
    again = client.post(f"/v1/groups/{group}/topics/{topic}/receive", json=body).json()
    assert again["messages"] == []  # the others were skipped, not left to block the queue


def test_a_long_poll_wakes_for_a_matching_arrival(client: httpx.Client, topic: str) -> None:
    create_topic(client, topic)
    params: dict[str, str | int] = {"filter": "region = 'eu'", "wait_ms": 20_000, "offset": 0}
    result: dict[str, Any] = {}

    def poll() -> None:
        with httpx.Client(base_url=str(client.base_url), timeout=40) as other:
            result["answer"] = other.get(
                f"/v1/topics/{topic}/queues/0/messages", params=params
            ).json()

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(0.5)
    client.post(
        f"/v1/topics/{topic}/messages",
        json={"messages": [{"body": "us", "properties": {"region": "us"}}], "queue_id": 0},
    )
    client.post(
        f"/v1/topics/{topic}/messages",
        json={"messages": [{"body": "eu", "properties": {"region": "eu"}}], "queue_id": 0},
    )
    waiter.join(30)
    assert not waiter.is_alive()
    assert bodies(result["answer"]) == ["eu"]


@pytest.mark.parametrize(
    ("expression", "where"),
    [
        ("a LIKE 'x%'", "position 2"),
        ("a = 'x' b = 'y'", "position 8"),
        ("NOT a = 'x'", "position 0"),
    ],
)
def test_a_filter_that_does_not_parse_is_refused_with_its_place(
    client: httpx.Client, topic: str, group: str, expression: str, where: str
) -> None:
    create_topic(client, topic)
    for answer in (
        client.get(f"/v1/topics/{topic}/queues/0/messages", params={"filter": expression}),
        client.get(f"/v1/groups/{group}/topics/{topic}/messages", params={"filter": expression}),
        client.post(f"/v1/groups/{group}/topics/{topic}/receive", json={"filter": expression}),
    ):
        assert answer.status_code == 400, answer.text
        problem = answer.json()
        assert problem["code"] == "INVALID_FILTER"
        assert where in problem["detail"]


def test_a_refused_filter_commits_nothing(client: httpx.Client, topic: str, group: str) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    params: dict[str, str | int] = {"group": group, "commit_offset": 5, "filter": "a ="}
    assert client.get(f"/v1/topics/{topic}/queues/0/messages", params=params).status_code == 400
    position = client.get(f"/v1/topics/{topic}/queues/0/messages", params={"group": group})
    assert position.json()["messages"][0]["queue_offset"] == 0


def test_a_group_subscription_filters_its_pulls_and_receives(
    client: httpx.Client, topic: str, group: str
) -> None:
    create_topic(client, topic)
    send_orders(client, topic)
    stored = client.put(f"/v1/groups/{group}", json={"filters": {topic: EU}})
    assert stored.status_code in (200, 201), stored.text
    assert client.get(f"/v1/groups/{group}").json()["filters"] == {topic: EU}
    answer = client.get(f"/v1/groups/{group}/topics/{topic}/messages").json()
    assert bodies(answer) == ["order-2", "order-5", "order-7"]
    one_queue: dict[str, str | int] = {"group": group, "offset": 0}
    answer = client.get(f"/v1/topics/{topic}/queues/0/messages", params=one_queue).json()
    assert bodies(answer) == ["order-2", "order-5", "order-7"]
    # a request's own filter takes the place of the group's
    own: dict[str, str | int] = {**one_queue, "filter": "region = 'ap'"}
    answer = client.get(f"/v1/topics/{topic}/queues/0/messages", params=own).json()
    assert bodies(answer) == ["order-3", "order-6"]
    pop_group = f"{group}_pop"
    client.put(f"/v1/groups/{pop_group}", json={"filters": {topic: "amount > 5"}})
    received = client.post(f"/v1/groups/{pop_group}/topics/{topic}/receive", json={})
    assert bodies(received.json()) == ["order-6", "order-7"]


def test_a_group_subscription_that_does_not_parse_is_refused(
    client: httpx.Client, topic: str, group: str
) -> None:
    answer = client.put(f"/v1/groups/{group}", json={"filters": {topic: "region ="}})
    assert answer.status_code == 400
    assert answer.json()["code"] == "INVALID_FILTER"
    assert client.get(f"/v1/groups/{group}").status_code == 404

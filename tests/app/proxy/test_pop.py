"""POP through the proxy (:mod:`app.proxy.pop`): receives shared out over the broker groups
hosting a topic, with receipt handles that name their group, so acks and changes of
invisibility go back to the group that issued each handle."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.app.proxy.support import (
    Cluster,
    FaultyHop,
    create_topic,
    is_problem,
    probe_drained_groups_once,
    send,
)
from tests.conftest import wait_until


def receive(http: httpx.Client, group: str, topic: str, **body: Any) -> list[dict[str, Any]]:
    answer = http.post(f"/v1/groups/{group}/topics/{topic}/receive", json=body)
    assert answer.status_code == 200, answer.text
    messages: list[dict[str, Any]] = answer.json()["messages"]
    return messages


def test_messages_received_through_the_proxy_are_acked_at_the_group_that_issued_them(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Jobs", 4)  # 0, 1 on g1; 2, 3 on g2 (its 0, 1)
    for i in range(6):
        send(http, "Jobs", f"j{i}", queue_id=i % 4)
    received: list[dict[str, Any]] = []
    for _ in range(20):
        received += receive(http, "Poppers", "Jobs", max_messages=4, wait_ms=0)
        if len(received) >= 6:
            break
    assert sorted(m["body"] for m in received) == [f"j{i}" for i in range(6)]
    for message in received:  # in the cluster's terms
        group = "g1" if message["queue_id"] < 2 else "g2"
        assert message["broker_group"] == group
        assert message["receipt_handle"].startswith(f"{group}~")
        assert message["body"] == f"j{message['queue_id']}" or message["body"] in ("j4", "j5")
    handles = [m["receipt_handle"] for m in received]
    foreign = ["junk", "g9~not-a-group", "g1~not-a-handle"]
    acked = http.post("/v1/groups/Poppers/acks", json={"receipt_handles": [*handles, *foreign]})
    assert acked.status_code == 200, acked.text
    outcomes = [r["outcome"] for r in acked.json()["results"]]
    assert outcomes == ["acked"] * 6 + ["invalid"] * 3
    assert [r["receipt_handle"] for r in acked.json()["results"]] == [*handles, *foreign]
    assert receive(http, "Poppers", "Jobs", wait_ms=0) == []

    send(http, "Jobs", "later", queue_id=3)
    [late] = receive(http, "Poppers", "Jobs", wait_ms=5000)
    changed = http.post(
        "/v1/groups/Poppers/invisibility",
        json={"receipt_handle": late["receipt_handle"], "invisible_ms": 60000},
    )
    assert changed.status_code == 200, changed.text
    new_handle = changed.json()["receipt_handle"]
    assert new_handle.startswith("g2~") and new_handle != late["receipt_handle"]
    final = http.post("/v1/groups/Poppers/acks", json={"receipt_handles": [new_handle]})
    assert final.json()["results"][0]["outcome"] == "acked"


def test_handles_the_proxy_did_not_issue_are_refused(cluster: Cluster) -> None:
    http = cluster.http
    for handle in ("junk", "g9~x", "~x", 5):
        refused = http.post(
            "/v1/groups/P/invisibility", json={"receipt_handle": handle, "invisible_ms": 1000}
        )
        is_problem(refused, 400, "INVALID_RECEIPT_HANDLE")
    mistakes: list[dict[str, Any]] = [
        {},
        {"receipt_handles": []},
        {"receipt_handles": ["a", 1]},
        {"receipt_handles": "a"},
    ]
    for bad in mistakes:
        is_problem(http.post("/v1/groups/P/acks", json=bad), 422, "VALIDATION_FAILED")


def test_a_receive_asked_for_wrongly_is_the_brokers_refusal(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Wrong", 4)
    send(http, "Wrong", "kept", queue_id=2)
    url = "/v1/groups/W/topics/Wrong/receive"
    for budget in (0, -1, "2", True, None):
        answer = http.post(url, json={"max_messages": budget})
        assert answer.status_code == 422, (budget, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
    not_an_object = http.post(url, content=b"[1]", headers={"content-type": "application/json"})
    is_problem(not_an_object, 422, "VALIDATION_FAILED")
    is_problem(http.post("/v1/groups/W/topics/Nope/receive", json={}), 404, "TOPIC_NOT_FOUND")
    assert [m["body"] for m in receive(http, "W", "Wrong")] == ["kept"]  # nothing hidden before


def deep_receive(depth: int) -> bytes:
    """A receive whose body holds a member nested deeper than the proxy can encode again
    (orjson reads 1024 levels but writes 254)."""
    return b'{"max_messages":1,"invisible_ms":1500,"x":' + b"[" * depth + b"]" * depth + b"}"


def test_a_receive_too_deep_to_pass_on_is_a_client_error(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "DeepPop", 4)
    send(http, "DeepPop", "kept", queue_id=0)
    failed = http.post(
        "/v1/groups/D/topics/DeepPop/receive",
        content=deep_receive(300),
        headers={"content-type": "application/json"},
    )
    is_problem(failed, 422, "VALIDATION_FAILED")
    assert [m["body"] for m in receive(http, "D", "DeepPop")] == ["kept"]


def readable_on_b(cluster: Cluster, topic: str, readable: bool) -> None:
    perm = 6 if readable else 2  # 2: write only
    answer = httpx.put(
        f"{cluster.b.url}/v1/topics/{topic}",
        json={"write_queue_nums": 2, "read_queue_nums": 2, "perm": perm},
        timeout=10,
    )
    assert answer.status_code in (200, 201), answer.text


def test_a_receive_one_group_refuses_still_answers_what_the_other_popped(
    cluster: Cluster,
) -> None:
    """Otherwise what g1 popped stays invisible, for nobody, until its invisibility ends."""
    http = cluster.http
    create_topic(http, "HalfPop", 4)
    send(http, "HalfPop", "on-g1", queue_id=1)
    readable_on_b(cluster, "HalfPop", readable=False)
    received = http.post("/v1/groups/Poppers/topics/HalfPop/receive", json={"max_messages": 8})
    readable_on_b(cluster, "HalfPop", readable=True)
    assert received.status_code == 200, received.text
    assert [m["body"] for m in received.json()["messages"]] == ["on-g1"]


@pytest.mark.parametrize("arrives_at", ["g1", "g2"])
def test_a_long_poll_receive_gets_what_arrives(cluster: Cluster, arrives_at: str) -> None:
    http = cluster.http
    create_topic(http, "Waiting", 4)
    queue_id = 1 if arrives_at == "g1" else 3
    late = threading.Timer(0.3, lambda: send(http_other, "Waiting", "late", queue_id=queue_id))
    with httpx.Client(base_url=cluster.proxy.url, timeout=40) as http_other:
        late.start()
        try:
            got = receive(http, "Sleepers", "Waiting", max_messages=4, wait_ms=10_000)
        finally:
            late.join()
    assert [(m["body"], m["queue_id"], m["broker_group"]) for m in got] == [
        ("late", queue_id, arrives_at)
    ]


# ================================================================ a receive whose answer is lost


def test_a_receive_not_answered_asks_only_the_groups_left(cluster: Cluster, hop: FaultyHop) -> None:
    """A group that gave no answer may have popped what it found: it is not asked again (that
    would hide more), and what it popped comes back when its invisibility ends."""
    http = cluster.http
    probe_drained_groups_once(cluster)
    for i in range(6):
        send(http, "Hopped", f"p{i}", queue_id=2)

    def popped() -> list[str]:
        got = receive(http, "P", "Hopped", max_messages=2, invisible_ms=1500)
        return [m["body"] for m in got]

    # shared evenly (g1 has nothing and is drained), g1's one probe, g2 alone
    bodies = popped() + popped() + popped()
    assert len(bodies) == 4
    asked = hop.requests
    hop.plan.append("lose")  # g2 pops the last two; its answer never reaches the proxy

    assert popped() == []  # g1, the group left, had nothing
    assert hop.requests == asked + 1  # g2 was not asked again

    seen = set(bodies)

    def redelivered() -> bool:
        seen.update(popped())
        return len(seen) == 6

    wait_until(redelivered, timeout=60)
    assert seen == {f"p{i}" for i in range(6)}

"""POP through the proxy (:mod:`app.proxy.pop`): receives shared out over the broker groups
hosting a topic, long-polled one group at a time so that nothing a group hands out goes
unanswered, with receipt handles that name their group, so acks and changes of invisibility
go back to the group that issued each handle — and an ack that spans groups answers per
handle when one group does not take it."""

from __future__ import annotations

import threading
import time
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
from tests.conftest import LiveServer, wait_until


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
        {"receipt_handles": ["g1~x"] * 257},
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


# ================================================================ long-polls while both groups fill


def handed_out(live: LiveServer) -> int:
    """How many messages ``live``'s broker has handed out to POP receives."""
    for line in httpx.get(f"{live.url}/metrics", timeout=10).text.splitlines():
        if line.startswith("spoolmq_pop_received_total "):
            return int(float(line.split()[1]))
    raise AssertionError("no spoolmq_pop_received_total")


class Receivers:
    """Workers that long-poll through the proxy and ack what they get, until stopped; every
    delivery noted as (body, delivery_attempt)."""

    def __init__(self, url: str, group: str, topic: str, workers: int) -> None:
        self.url, self.group, self.topic = url, group, topic
        self.deliveries: list[tuple[str, int]] = []
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers)]
        for thread in self.threads:
            thread.start()

    def _work(self) -> None:
        ask = {"max_messages": 4, "wait_ms": 2000, "invisible_ms": 30_000}
        with httpx.Client(base_url=self.url, timeout=40) as http:
            while not self.stopping.is_set():
                answer = http.post(f"/v1/groups/{self.group}/topics/{self.topic}/receive", json=ask)
                if answer.status_code != 200:
                    self.errors.append(answer.text)
                    return
                messages = answer.json()["messages"]
                with self.lock:
                    self.deliveries += [(m["body"], m["delivery_attempt"]) for m in messages]
                if messages:
                    handles = [m["receipt_handle"] for m in messages]
                    http.post(f"/v1/groups/{self.group}/acks", json={"receipt_handles": handles})

    def bodies(self) -> set[str]:
        with self.lock:
            return {body for body, _ in self.deliveries}

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)


def send_to(url: str, topic: str, queue_id: int, bodies: list[str]) -> None:
    with httpx.Client(base_url=url, timeout=40) as http:
        for body in bodies:
            send(http, topic, body, queue_id=queue_id)
            time.sleep(0.005)  # arrivals spread out: receivers park between them


def test_a_long_polled_receive_answers_every_message_it_takes(cluster: Cluster) -> None:
    """Messages arrive in both groups while workers long-poll: every message a broker hands
    out reaches a worker at its first attempt (a receive that left one unanswered would hide
    it until its invisibility ended, then it would come back as attempt 2)."""
    create_topic(cluster.http, "Arrivals", 4)  # 0, 1 on g1; 2, 3 on g2
    url = cluster.proxy.url
    receivers = Receivers(url, "Parked", "Arrivals", workers=4)
    expected: set[str] = set()
    try:
        for burst in range(3):
            time.sleep(0.5)  # every worker parked again
            senders = []
            for queue_id in (1, 3):  # both groups at once
                bodies = [f"b{burst}-q{queue_id}-{i}" for i in range(20)]
                expected.update(bodies)
                senders.append(
                    threading.Thread(target=send_to, args=(url, "Arrivals", queue_id, bodies))
                )
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join(timeout=60)
        wait_until(lambda: receivers.bodies() >= expected or bool(receivers.errors), timeout=60)
    finally:
        receivers.stop()
    assert receivers.errors == []
    assert receivers.bodies() == expected
    first_attempts: dict[str, int] = {}
    for body, attempt in receivers.deliveries:
        first_attempts.setdefault(body, attempt)
    assert set(first_attempts.values()) == {1}
    # nothing handed out that no worker got
    assert handed_out(cluster.a) + handed_out(cluster.b) == len(receivers.deliveries)


# ================================================================ an ack that spans groups


def received_all(http: httpx.Client, group: str, topic: str, count: int) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    for _ in range(20):
        got += receive(http, group, topic, max_messages=count, invisible_ms=60_000)
        if len(got) >= count:
            break
    assert len(got) == count, got
    return got


def test_an_ack_spanning_a_group_whose_master_is_down_answers_per_handle(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Spanned", 4)  # 0, 1 on g1; 2, 3 on g2
    for queue_id in range(4):
        send(http, "Spanned", f"s{queue_id}", queue_id=queue_id)
    got = sorted(received_all(http, "Acks", "Spanned", 4), key=lambda m: m["queue_id"])
    handles = [m["receipt_handle"] for m in got]  # g1, g1, g2, g2
    cluster.b.stop()  # g2's master: down (no election here: etcd still names it)

    acked = http.post("/v1/groups/Acks/acks", json={"receipt_handles": [*handles, "junk"]})
    assert acked.status_code == 207, acked.text
    assert acked.headers["retry-after"] == "1"
    results = acked.json()["results"]
    assert acked.json()["group"] == "Acks"
    assert [r["receipt_handle"] for r in results] == [*handles, "junk"]
    assert [r["outcome"] for r in results] == ["acked", "acked", "failed", "failed", "invalid"]
    assert [r.get("code") for r in results] == [
        None,
        None,
        "BROKER_UNAVAILABLE",
        "BROKER_UNAVAILABLE",
        None,
    ]
    assert all(r["detail"] for r in results[2:])
    # g1's acks took effect: nothing of g1 is in flight (and acking them again is harmless)
    in_flight = httpx.get(f"{cluster.a.url}/v1/groups/Acks/in-flight", timeout=10).json()
    assert in_flight["total"] == 0
    again = http.post("/v1/groups/Acks/acks", json={"receipt_handles": handles[:2]})
    assert again.status_code == 200, again.text
    assert [r["outcome"] for r in again.json()["results"]] == ["acked", "acked"]
    # an ack that no group took is that group's problem, as a whole: nothing took effect
    refused = http.post("/v1/groups/Acks/acks", json={"receipt_handles": handles[2:]})
    is_problem(refused, 503, "BROKER_UNAVAILABLE")


def test_handles_a_group_refused_may_be_acked_again(cluster: Cluster, hop: FaultyHop) -> None:
    http = cluster.http
    send(http, "Hopped", "on-g1", queue_id=0)
    send(http, "Hopped", "on-g2", queue_id=2)
    got = sorted(received_all(http, "Refused", "Hopped", 2), key=lambda m: m["queue_id"])
    handles = [m["receipt_handle"] for m in got]
    hop.plan.append("NO_MASTER")  # g2's ack is refused before it reaches the broker

    acked = http.post("/v1/groups/Refused/acks", json={"receipt_handles": handles})
    assert acked.status_code == 207, acked.text
    results = acked.json()["results"]
    assert [(r["outcome"], r.get("code")) for r in results] == [
        ("acked", None),
        ("failed", "NO_MASTER"),
    ]
    retried = http.post("/v1/groups/Refused/acks", json={"receipt_handles": handles[1:]})
    assert retried.status_code == 200, retried.text
    assert [r["outcome"] for r in retried.json()["results"]] == ["acked"]

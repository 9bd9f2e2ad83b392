"""Sends through the proxy (:mod:`app.proxy.sending`): where a send goes, and its at-most-once
rules — a send that never reached a broker, or was refused before it was written, goes to
another group (round robin) or is answered 503; one that may have been written is tried again
on the same queue of the same group with the same key, never elsewhere, until a broker answers
(then it is stored once) or the time is up (504 OUTCOME_UNKNOWN, naming the key).

Brokers that misbehave are real sockets on 127.0.0.1: one in a broker's place that hangs up or
resets, or one between the proxy and a real broker that loses or replaces its answers."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import orjson
import pytest

from services.send import shard_queue
from tests.app.proxy.support import (
    BadBroker,
    Cluster,
    FaultyHop,
    create_topic,
    g2_is,
    is_problem,
    local_queue_counts,
    member,
    put_members,
    send,
    start_proxy,
)
from tests.conftest import start_server, wait_until


def test_a_keyed_send_goes_where_its_key_hashes_through_any_proxy(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Keyed")
    key = "order-42-paid"
    first = http.post(
        "/v1/topics/Keyed/messages", json={"body": "paid"}, headers={"Idempotency-Key": key}
    )
    assert first.status_code == 201, first.text
    receipt = first.json()
    assert receipt["messages"][0]["queue_id"] == shard_queue(key, 8)
    assert receipt["broker_group"] == ("g1" if shard_queue(key, 8) < 4 else "g2")
    assert "idempotent-replayed" not in first.headers
    other = start_proxy(cluster.etcd.url)
    try:
        again = httpx.post(
            f"{other.url}/v1/topics/Keyed/messages",
            json={"body": "paid"},
            headers={"Idempotency-Key": f'"{key}"'},  # the quoted form names the same key
            timeout=10,
        )
    finally:
        other.stop()
    assert again.status_code == 201, again.text
    assert again.headers["idempotent-replayed"] == "true"  # the client's own key: it is told
    assert again.json() == receipt
    reused = http.post(
        "/v1/topics/Keyed/messages", json={"body": "refunded"}, headers={"Idempotency-Key": key}
    )
    is_problem(reused, 422, "IDEMPOTENCY_KEY_REUSED")  # the broker's refusal, passed on
    bad_key = http.post(
        "/v1/topics/Keyed/messages", json={"body": "x"}, headers={"Idempotency-Key": "a b"}
    )
    is_problem(bad_key, 400, "INVALID_IDEMPOTENCY_KEY")
    stored = sum(local_queue_counts(cluster.a, "Keyed").values())
    assert stored + sum(local_queue_counts(cluster.b, "Keyed").values()) == 1


def test_a_send_that_may_have_been_written_is_retried_there_with_its_key_then_504(
    cluster: Cluster,
) -> None:
    create_topic(cluster.http, "Unsure", 4)  # queues 0, 1 on g1; 2, 3 on g2
    bad = BadBroker("hang_up")
    with g2_is(cluster, bad) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        unknown = http.post("/v1/topics/Unsure/messages", json={"body": "x", "queue_id": 3})
        problem = is_problem(unknown, 504, "OUTCOME_UNKNOWN")
        assert "retry-after" not in unknown.headers
        assert "Idempotency-Key" in problem["detail"]
        assert problem["broker_group"] == "g2"
        own_key = problem["idempotency_key"]
        assert len(bad.keys) >= 2 and set(bad.keys) == {own_key}  # same key, every attempt
        bad.keys.clear()
        keyed = http.post(
            "/v1/topics/Unsure/messages",
            json={"body": "y", "queue_id": 2},
            headers={"Idempotency-Key": "client-key-1"},
        )
        assert is_problem(keyed, 504, "OUTCOME_UNKNOWN")["idempotency_key"] == "client-key-1"
        assert set(bad.keys) == {"client-key-1"}
        # Round robin: a send that reached g2's broker stays there (504), never goes to g1.
        answers = [
            http.post("/v1/topics/Unsure/messages", json={"body": f"rr{i}"}) for i in range(4)
        ]
        statuses = sorted(a.status_code for a in answers)
    assert statuses == [201, 201, 504, 504]
    assert sum(local_queue_counts(cluster.a, "Unsure").values()) == 2


class KeylessAfterHangUp(BadBroker):
    """Hangs up on the first request; answers every later keyed one 501
    IDEMPOTENCY_UNAVAILABLE (a new master without the message index, after a failover); hangs
    up on an unkeyed one (noting it, as every request)."""

    def _read_request(self, connection: socket.socket) -> None:
        seen = len(self.keys)
        super()._read_request(connection)
        if len(self.keys) == seen or seen == 0 or not self.keys[-1]:
            return
        body = orjson.dumps(
            {"type": "about:blank", "status": 501, "code": "IDEMPOTENCY_UNAVAILABLE"}
        )
        connection.sendall(
            b"HTTP/1.1 501 Not Implemented\r\ncontent-type: application/problem+json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )


def test_a_send_that_may_have_been_written_is_never_sent_again_without_its_key(
    cluster: Cluster,
) -> None:
    """A broker that keeps no keys cannot tell a repeat: once a send may have been written,
    its outcome stays unknown rather than risk a second copy."""
    create_topic(cluster.http, "Keyless", 4)  # queues 2, 3 on g2
    bad = KeylessAfterHangUp("hang_up")
    with g2_is(cluster, bad) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        unknown = http.post("/v1/topics/Keyless/messages", json={"body": "x", "queue_id": 3})
        is_problem(unknown, 504, "OUTCOME_UNKNOWN")
    assert len(bad.keys) >= 2 and bad.keys[0]
    assert "" not in bad.keys  # an unkeyed repeat could have been stored a second time


def test_a_broker_dying_as_it_is_reached_is_a_problem_never_a_500(cluster: Cluster) -> None:
    create_topic(cluster.http, "Dying", 4)
    bad = BadBroker("reset")
    with g2_is(cluster, bad) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        sent = http.post("/v1/topics/Dying/messages", json={"body": "x", "queue_id": 3})
        raw = http.post(
            "/v1/topics/Dying/messages",
            params={"queue_id": 2},
            content=b"raw",
            headers={"content-type": "application/octet-stream"},
        )
        pull = http.get("/v1/topics/Dying/queues/3/messages")
        group_pull = http.get("/v1/groups/G/topics/Dying/messages")
        receive = http.post("/v1/groups/P/topics/Dying/receive", json={"wait_ms": 0})
    for answer in (sent, raw):
        assert answer.status_code in (503, 504), answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["request_id"] == answer.headers["x-request-id"]
    # Reads go on to another replica of g2 (broker b is still registered) or to g1.
    for answer in (pull, group_pull, receive):
        assert answer.status_code == 200, answer.text


def test_with_no_group_to_take_it_a_send_is_503_and_nothing_is_stored(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Nowhere", 4)
    cluster.a.stop()
    cluster.b.stop()
    for fields in ({}, {"queue_id": 1}, {"sharding_key": "k"}):
        answer = http.post("/v1/topics/Nowhere/messages", json={"body": "x", **fields})
        assert answer.status_code == 503, (fields, answer.text)
        assert answer.headers["retry-after"] == "1"
        assert answer.json()["request_id"] == answer.headers["x-request-id"]


# ================================================================ answers lost or replaced


def send_to_g2(http: httpx.Client, body: str, **headers: str) -> httpx.Response:
    return http.post(
        "/v1/topics/Hopped/messages", json={"body": body, "queue_id": 2}, headers=headers
    )


@pytest.mark.parametrize("fault", ["lose", "500"])
def test_a_send_whose_answer_fails_is_stored_once_under_its_key(
    cluster: Cluster, hop: FaultyHop, fault: str
) -> None:
    http = cluster.http
    for i in range(2):
        assert send_to_g2(http, f"before{i}").status_code == 201
    hop.keys.clear()
    hop.plan.append(fault)  # the broker stores the next send; its answer never reaches the proxy

    answer = send_to_g2(http, "once")

    assert answer.status_code == 201, answer.text
    receipt = answer.json()
    assert receipt["broker_group"] == "g2"
    assert receipt["messages"][0]["queue_id"] == 2
    assert "idempotent-replayed" not in answer.headers  # the proxy's own retry, not the client's
    assert len(hop.keys) == 2 and hop.keys[0] and hop.keys[0] == hop.keys[1]  # with its key
    assert local_queue_counts(cluster.b, "Hopped")[0] == 3  # stored once
    pulled = http.get("/v1/topics/Hopped/queues/2/messages").json()["messages"]
    assert [m["body"] for m in pulled] == ["before0", "before1", "once"]


def test_a_clients_keyed_send_whose_answer_is_lost_is_answered_its_receipts(
    cluster: Cluster, hop: FaultyHop
) -> None:
    http = cluster.http
    hop.plan.append("lose")
    answer = send_to_g2(http, "mine", **{"Idempotency-Key": "client-1"})
    assert answer.status_code == 201, answer.text
    assert hop.keys == ["client-1", "client-1"]
    assert local_queue_counts(cluster.b, "Hopped")[0] == 1
    # The client asks again itself: the broker says it is a replay, and the client is told.
    again = send_to_g2(http, "mine", **{"Idempotency-Key": "client-1"})
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == answer.json()


@pytest.mark.parametrize("code", ["BROKER_UNAVAILABLE", "NO_MASTER"])
def test_a_placed_send_refused_before_writing_passes_the_refusal_on(
    cluster: Cluster, hop: FaultyHop, code: str
) -> None:
    """Nothing was written and no other queue will do: the broker's refusal is the answer,
    after one attempt."""
    http = cluster.http
    for headers in ({}, {"Idempotency-Key": "k-refused"}):
        hop.plan.append(code)
        asked = hop.requests
        refused = send_to_g2(http, "x", **headers)
        assert (refused.status_code, refused.json()["code"]) == (503, code), refused.text
        assert hop.requests == asked + 1
    assert local_queue_counts(cluster.b, "Hopped")[0] == 0


def test_a_round_robin_send_refused_before_writing_goes_to_another_group(
    cluster: Cluster, hop: FaultyHop
) -> None:
    http = cluster.http
    hop.plan += ["BROKER_UNAVAILABLE"] * 8
    receipts = [send(http, "Hopped", f"rr{i}") for i in range(4)]
    assert all(r["queue_id"] in (0, 1) for r in receipts)  # g1's
    assert sum(local_queue_counts(cluster.a, "Hopped").values()) == 4
    assert sum(local_queue_counts(cluster.b, "Hopped").values()) == 0


def test_a_send_the_proxy_keyed_goes_again_without_its_key_where_keys_are_not_kept(
    cluster: Cluster, hop: FaultyHop
) -> None:
    """IDEMPOTENCY_UNAVAILABLE before anything may have been written: the broker stored
    nothing, and keeps no keys — the send goes again without one, once."""
    http = cluster.http
    hop.plan.append("IDEMPOTENCY_UNAVAILABLE")
    answer = send_to_g2(http, "unkeyed")
    assert answer.status_code == 201, answer.text
    assert len(hop.keys) == 2 and hop.keys[0] and hop.keys[1] == ""
    assert local_queue_counts(cluster.b, "Hopped")[0] == 1


def test_a_clients_keyed_send_refused_for_its_key_passes_the_refusal_on(
    cluster: Cluster, hop: FaultyHop
) -> None:
    """Nothing was written, and the key cannot be kept there: the client is told at once,
    not answered OUTCOME_UNKNOWN once the send's time is up."""
    http = cluster.http
    hop.plan.append("IDEMPOTENCY_UNAVAILABLE")
    refused = send_to_g2(http, "keyed", **{"Idempotency-Key": "client-2"})
    is_problem(refused, 501, "IDEMPOTENCY_UNAVAILABLE")
    assert hop.keys == ["client-2"]
    assert local_queue_counts(cluster.b, "Hopped")[0] == 0


# ================================================================ a new master


def test_a_send_follows_a_new_master_in_etcd(cluster: Cluster, tmp_path: Path) -> None:
    http = cluster.http
    create_topic(http, "Fail", 4)  # queues 2, 3 are g2's (broker b)
    before = send(http, "Fail", "before", queue_id=3)
    b = cluster.b
    slave = start_server(
        tmp_path / "b2",
        broker_name="b2",
        role="slave",
        master_http=b.url,
        master_ha=b.broker.replica.ha_address,
        master_name="b",
        config_sync_interval_s=0.2,
    )
    try:
        put_members(cluster.etcd.url, {}, member("b2", "g2", slave, "slave"))
        wait_until(lambda: http.get("/healthz").json()["slaves"].get("g2") == ["b2"])
        wait_until(lambda: local_queue_counts(slave, "Fail").get(1) == 1, timeout=60)
        b.stop()
        # The master is gone and etcd still names it: reads fall back to the slave ...
        from_slave = http.get("/v1/topics/Fail/queues/3/messages").json()
        assert [(m["body"], m["queue_id"]) for m in from_slave["messages"]] == [("before", 3)]
        # ... while writes there wait for a new master.
        refused = http.post("/v1/topics/Fail/messages", json={"body": "x", "queue_id": 3})
        assert refused.status_code == 503 and "retry-after" in refused.headers
        put_members(cluster.etcd.url, {"g2": member("b2", "g2", slave)})
        wait_until(lambda: http.get("/healthz").json()["masters"].get("g2") == "b2", timeout=30)
        # Named master before it is promoted: its 421 passes through as the broker gave it.
        early = http.post("/v1/topics/Fail/messages", json={"body": "x", "queue_id": 3})
        assert (early.status_code, early.json()["code"]) == (421, "NOT_MASTER")
        promoted = asyncio.run_coroutine_threadsafe(
            slave.broker.replica.promote(2), slave.broker.loop
        )
        promoted.result(60)
        pulled = http.get("/v1/topics/Fail/queues/3/messages").json()
        assert [(m["body"], m["queue_id"]) for m in pulled["messages"]] == [("before", 3)]
        found = http.get(f"/v1/messages/{before['msg_id']}")
        assert (found.status_code, found.json()["queue_id"]) == (200, 3)
        after = send(http, "Fail", "after", queue_id=3)
        assert after["queue_id"] == 3
        assert local_queue_counts(slave, "Fail")[1] == 2
        assert send(http, "Fail", "g1 still", queue_id=0)["queue_id"] == 0
    finally:
        slave.stop()

"""Sends through the proxy: where a key places them, request ids on every answer, and what a
send that may have been written becomes when its broker never answers — tried again on the
same group with the same key, never elsewhere, then 504 OUTCOME_UNKNOWN.

Real etcd, real brokers, the proxy on uvicorn; a broker that misbehaves is a real socket on
127.0.0.1 that reads a request and hangs up, or resets every connection."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.proxy.context import ProxyLimits
from services.cluster import BrokerMember
from services.send import shard_queue
from tests.app.test_proxy import (
    Cluster,
    ProxyServer,
    create_topic,
    local_queue_counts,
    member,
    put_members,
    start_proxy,
    two_groups,
)
from tests.conftest import wait_until

QUICK = ProxyLimits(send_timeout_s=1.5, send_attempt_timeout_s=0.5)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


class BadBroker:
    """A socket that takes connections as a broker would and then fails them.

    ``hang_up``: reads each request whole, notes its Idempotency-Key, closes without an answer.
    ``reset``: resets each connection as soon as it is accepted (a broker dying mid-connect).
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.keys: list[str] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                connection, _ = self.server.accept()
            except TimeoutError:
                continue
            with connection:
                if self.mode == "reset":
                    connection.setsockopt(
                        socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                    )
                    continue
                self._read_request(connection)

    def _read_request(self, connection: socket.socket) -> None:
        connection.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = connection.recv(65536)
            if not chunk:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        headers = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        }
        length = int(headers.get(b"content-length", b"0"))
        while len(body) < length:
            chunk = connection.recv(65536)
            if not chunk:
                return
            body += chunk
        self.keys.append(headers.get(b"idempotency-key", b"").decode())

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        self.server.close()


@contextmanager
def g2_is(cluster: Cluster, bad: BadBroker) -> Iterator[ProxyServer]:
    """g2's master is ``bad`` in etcd; a proxy with short send bounds follows it."""
    proxy = start_proxy(cluster.etcd.url, limits=QUICK)
    try:
        put_members(cluster.etcd.url, {"g2": BrokerMember("bad", "g2", bad.url, "127.0.0.1:1")})
        wait_until(lambda: httpx.get(f"{proxy.url}/healthz").json()["masters"].get("g2") == "bad")
        yield proxy
    finally:
        proxy.stop()
        put_members(cluster.etcd.url, {"g2": member("b", "g2", cluster.b)})
        bad.stop()


def is_problem(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = answer.json()
    assert body["code"] == code
    assert body["request_id"] == answer.headers["x-request-id"]
    return body


def test_every_proxy_answer_carries_the_request_id_the_broker_saw(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Ids", 4)
    sent = http.post("/v1/topics/Ids/messages", json={"body": "x"}, headers={"X-Request-Id": "r-1"})
    assert (sent.status_code, sent.headers["x-request-id"]) == (201, "r-1")
    receipt = sent.json()
    assert receipt["broker_group"] in ("g1", "g2")
    assert receipt["messages"][0]["queue_id"] in range(4)
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
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == receipt
    reused = http.post(
        "/v1/topics/Keyed/messages", json={"body": "refunded"}, headers={"Idempotency-Key": key}
    )
    is_problem(reused, 422, "IDEMPOTENCY_KEY_REUSED")
    bad_key = http.post(
        "/v1/topics/Keyed/messages", json={"body": "x"}, headers={"Idempotency-Key": "a b"}
    )
    is_problem(bad_key, 400, "INVALID_IDEMPOTENCY_KEY")
    counts = {**local_queue_counts(cluster.a, "Keyed")}
    assert sum(counts.values()) + sum(local_queue_counts(cluster.b, "Keyed").values()) == 1


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


def test_a_broker_dying_as_it_is_reached_is_a_problem_never_a_500(cluster: Cluster) -> None:
    create_topic(cluster.http, "Dying", 4)
    bad = BadBroker("reset")
    with g2_is(cluster, bad) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as http:
        send = http.post("/v1/topics/Dying/messages", json={"body": "x", "queue_id": 3})
        raw = http.post(
            "/v1/topics/Dying/messages",
            params={"queue_id": 2},
            content=b"raw",
            headers={"content-type": "application/octet-stream"},
        )
        pull = http.get("/v1/topics/Dying/queues/3/messages")
        group_pull = http.get("/v1/groups/G/topics/Dying/messages")
        receive = http.post("/v1/groups/P/topics/Dying/receive", json={"wait_ms": 0})
    for answer in (send, raw):
        assert answer.status_code in (503, 504), answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["request_id"] == answer.headers["x-request-id"]
    # Reads go on to another replica of g2 (broker b is still registered) or to g1.
    for answer in (pull, group_pull, receive):
        assert answer.status_code == 200, answer.text


def test_the_send_headers_the_proxy_reads_without_a_header_object(cluster: Cluster) -> None:
    """Content-Type (the first one, parameters aside) and Idempotency-Key, read from the raw
    headers: a key is checked as the broker checks it, and only when there is one."""
    http = cluster.http
    create_topic(http, "Heads", 4)
    url = "/v1/topics/Heads/messages"
    twice = http.post(
        url, json={"body": "x"}, headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    )
    is_problem(twice, 400, "INVALID_IDEMPOTENCY_KEY")
    is_problem(
        http.post(url, json={"body": "x"}, headers={"Idempotency-Key": ""}),
        400,
        "INVALID_IDEMPOTENCY_KEY",
    )
    charset = http.post(
        url,
        content=b'{"body": "json with a charset"}',
        headers={"Content-Type": "application/json ; charset=utf-8", "Idempotency-Key": "k-1"},
    )
    assert charset.status_code == 201, charset.text
    assert charset.json()["messages"][0]["queue_id"] == shard_queue("k-1", 4)
    raw = http.post(
        url, content=b'{"body": "stored as it is"}', headers={"Content-Type": "text/plain"}
    )
    assert raw.status_code == 201, raw.text
    stored = sum(local_queue_counts(cluster.a, "Heads").values())
    assert stored + sum(local_queue_counts(cluster.b, "Heads").values()) == 2
    bodies = set()
    for queue in range(4):
        pulled = http.get(f"/v1/topics/Heads/queues/{queue}/messages").json()["messages"]
        bodies |= {m["body"] for m in pulled}
    assert bodies == {"json with a charset", '{"body": "stored as it is"}'}


def test_a_json_send_is_recognised_as_the_broker_recognises_it(cluster: Cluster) -> None:
    """Media types are case-insensitive, and ``application/*+json`` is JSON too; anything
    else (``text/json`` as well) is a raw body, as the broker decides."""
    http = cluster.http
    create_topic(http, "Media", 4)
    url = "/v1/topics/Media/messages"
    for queue, content_type in enumerate(
        ("Application/JSON", "APPLICATION/JSON; Charset=UTF-8", "application/vnd.x+JSON")
    ):
        body = b'{"body": "%s", "queue_id": %d}' % (content_type.encode(), queue)
        sent = http.post(url, content=body, headers={"Content-Type": content_type})
        assert sent.status_code == 201, sent.text
        assert sent.json()["messages"][0]["queue_id"] == queue
    raw = http.post(
        url,
        params={"queue_id": 3},
        content=b'{"body": "raw"}',
        headers={"Content-Type": "text/json"},
    )
    assert raw.status_code == 201, raw.text
    bodies = {
        queue: [
            m["body"] for m in http.get(f"{url[:-9]}/queues/{queue}/messages").json()["messages"]
        ]
        for queue in range(4)
    }
    assert bodies == {
        0: ["Application/JSON"],
        1: ["APPLICATION/JSON; Charset=UTF-8"],
        2: ["application/vnd.x+JSON"],
        3: ['{"body": "raw"}'],
    }

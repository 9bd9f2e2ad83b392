"""The proxy's lean lane (sends and pulls of one queue answered from protocol callbacks) when
the broker's answer on a warm keep-alive connection is not the receipts: the request goes on
by the same rules as the endpoint's way — a send that may have been written is tried again
on its queue with its key and stored once, a pull goes on to the group's next replica.

Real etcd, real brokers, the proxy on uvicorn. Between the proxy and g2's broker sits a real
socket on 127.0.0.1 that passes each request to the broker and, when told, loses the answer
(hangs up) or answers 500 in its place — after the broker has acted on the request."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.cluster import BrokerMember
from tests.app.test_proxy import (
    Cluster,
    create_topic,
    local_queue_counts,
    member,
    put_members,
    two_groups,
)
from tests.conftest import wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


def read_message(sock: socket.socket, buffer: bytearray) -> bytes | None:
    """One HTTP message (head and Content-Length body) from ``sock``; None at its end."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    head_end = buffer.index(b"\r\n\r\n") + 4
    length = 0
    for line in bytes(buffer[:head_end]).split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(buffer) < head_end + length:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buffer += chunk
    message = bytes(buffer[: head_end + length])
    del buffer[: head_end + length]
    return message


class FaultyHop:
    """Passes each request to ``broker`` over a connection of its own and, per request, does
    what ``plan`` says next (``pass`` once it is empty): ``pass`` the broker's answer back,
    ``lose`` it (close the proxy's connection), or answer ``500`` instead."""

    def __init__(self, broker_url: str) -> None:
        host, port = broker_url.removeprefix("http://").split(":")
        self.broker = (host, int(port))
        self.plan: list[str] = []
        self.keys: list[str] = []
        self.requests = 0
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.1)
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        try:
            self._pass(client)
        except OSError:
            pass  # the proxy closed an idle connection, or the test ended

    def _pass(self, client: socket.socket) -> None:
        client.settimeout(10)
        inbound = bytearray()
        with client, socket.create_connection(self.broker, timeout=10) as upstream:
            outbound = bytearray()
            while (request := read_message(client, inbound)) is not None:
                with self.lock:
                    self.requests += 1
                self._note_key(request)
                upstream.sendall(request)
                answer = read_message(upstream, outbound)
                if answer is None:
                    return
                with self.lock:
                    action = self.plan.pop(0) if self.plan else "pass"
                if action == "lose":
                    return
                if action == "500":
                    body = b'{"code":"INTERNAL_ERROR","status":500}'
                    answer = (
                        b"HTTP/1.1 500 Internal Server Error\r\n"
                        b"content-type: application/problem+json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(body), body)
                    )
                client.sendall(answer)

    def _note_key(self, request: bytes) -> None:
        for line in request.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"idempotency-key":
                with self.lock:
                    self.keys.append(value.strip().decode())

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        self.server.close()


@pytest.fixture
def hop(cluster: Cluster) -> Iterator[FaultyHop]:
    """g2's master is reached through a FaultyHop (etcd gives the hop's address for it), for
    topic Warm: queues 0, 1 on g1; 2, 3 on g2."""
    create_topic(cluster.http, "Warm", 4)
    hop = FaultyHop(cluster.b.url)
    put_members(cluster.etcd.url, {"g2": BrokerMember("b", "g2", hop.url, "127.0.0.1:1")})
    wait_until(lambda: pull(cluster.http).status_code == 200 and hop.requests > 0)
    try:
        yield hop
    finally:
        put_members(cluster.etcd.url, {"g2": member("b", "g2", cluster.b)})
        hop.stop()


def pull(http: httpx.Client, query: str = "", **kwargs: Any) -> httpx.Response:
    return http.get(f"/v1/topics/Warm/queues/2/messages{query}", **kwargs)


def send_to_g2(http: httpx.Client, body: str) -> httpx.Response:
    return http.post("/v1/topics/Warm/messages", json={"body": body, "queue_id": 2})


@pytest.mark.parametrize("fault", ["lose", "500"])
def test_a_warm_send_whose_answer_fails_is_stored_once_under_its_key(
    cluster: Cluster, hop: FaultyHop, fault: str
) -> None:
    http = cluster.http
    # The first send opens the proxy's connection to g2 and leaves it idle, kept alive: the
    # sends after it are written on it from the lean lane.
    for i in range(3):
        assert send_to_g2(http, f"warm{i}").status_code == 201
    hop.keys.clear()
    hop.plan.append(fault)  # the broker stores the next send; its answer never reaches the proxy

    answer = send_to_g2(http, "once")

    assert answer.status_code == 201, answer.text
    receipt = answer.json()
    assert receipt["broker_group"] == "g2"
    assert receipt["messages"][0]["queue_id"] == 2
    assert "idempotent-replayed" not in answer.headers  # the proxy's own retry, not the client's
    assert len(hop.keys) == 2 and hop.keys[0] == hop.keys[1]  # tried again with its key
    assert local_queue_counts(cluster.b, "Warm")[0] == 4  # stored once
    pulled = pull(http).json()["messages"]
    assert [m["body"] for m in pulled] == ["warm0", "warm1", "warm2", "once"]


def test_a_warm_keyed_send_refused_before_writing_passes_the_refusal_on(
    cluster: Cluster, hop: FaultyHop
) -> None:
    http = cluster.http
    for i in range(3):
        assert send_to_g2(http, f"warm{i}").status_code == 201
    keyed = http.post(
        "/v1/topics/Warm/messages",
        json={"body": "x", "queue_id": 2},
        headers={"Idempotency-Key": "k-1"},
    )
    assert keyed.status_code == 201
    again = http.post(
        "/v1/topics/Warm/messages",
        json={"body": "x", "queue_id": 2},
        headers={"Idempotency-Key": "k-1"},
    )
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"  # the client's own key: it is told
    assert again.json()["messages"] == keyed.json()["messages"]
    # The same key for another payload: the broker's 422 passes through as it is.
    other = http.post(
        "/v1/topics/Warm/messages",
        json={"body": "y", "queue_id": 2},
        headers={"Idempotency-Key": "k-1"},
    )
    assert other.status_code == 422, other.text
    assert other.headers["content-type"].startswith("application/problem+json")
    assert other.json()["request_id"] == other.headers["x-request-id"]
    assert local_queue_counts(cluster.b, "Warm")[0] == 4


def test_a_warm_pull_not_answered_is_read_from_the_groups_slave(
    cluster: Cluster, hop: FaultyHop
) -> None:
    http = cluster.http
    assert send_to_g2(http, "m").status_code == 201
    # b itself, as g2's slave (etcd's word is all the proxy has): the reader after the master.
    put_members(cluster.etcd.url, {}, member("b-replica", "g2", cluster.b, "slave"))
    wait_until(lambda: http.get("/healthz").json()["slaves"].get("g2") == ["b-replica"])
    for _ in range(3):  # warm: the pulls go through the hop on a kept-alive connection
        assert pull(http).status_code == 200
    hop.plan.append("lose")

    pulled = pull(http, "?max_messages=4")

    assert pulled.status_code == 200, pulled.text
    assert pulled.json()["queue_id"] == 2
    assert [(m["body"], m["queue_id"]) for m in pulled.json()["messages"]] == [("m", 2)]


def test_a_warm_pull_not_answered_by_the_only_replica_is_503(
    cluster: Cluster, hop: FaultyHop
) -> None:
    http = cluster.http
    assert send_to_g2(http, "m").status_code == 201
    for _ in range(3):
        assert pull(http).status_code == 200
    hop.plan.append("lose")

    pulled = pull(http, headers={"X-Request-Id": "r-9"})

    assert pulled.status_code == 503, pulled.text
    assert pulled.headers["retry-after"] == "1"
    problem = pulled.json()
    assert problem["code"] == "BROKER_UNAVAILABLE"
    assert problem["request_id"] == "r-9" == pulled.headers["x-request-id"]
    # The proxy serves on: the next pull opens a new connection through the hop.
    assert pull(http).status_code == 200

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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from app.proxy.protocol import find_lane

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


# ================================================================ group pulls and receives


def probe_rarely(cluster: Cluster) -> None:
    """The proxy probes a drained group once, then not again during the test: which groups a
    round asks is then known (the lean lane takes the rounds that ask one group)."""
    lane = find_lane(cluster.proxy.server.config.loaded_app)
    assert lane is not None
    lane.app.state.budget_shares.probe_interval_s = 3600


def group_pull(http: httpx.Client, max_messages: int, **params: Any) -> list[str]:
    answer = http.get(
        "/v1/groups/G/topics/Fan/messages",
        params={"max_messages": max_messages, "auto_commit": "true", **params},
    )
    assert answer.status_code == 200, answer.text
    return [m["body"] for m in answer.json()["messages"]]


def fill_g1_in_full_shares(http: httpx.Client) -> None:
    """Topic Fan with 13 messages in g1, pulled in four rounds each filled to its share: two
    evenly shared (g2, with nothing, is drained), one with g2's probe, two of g1 alone. The
    next round asks g1 alone (the lean lane's) and finds it empty."""
    create_topic(http, "Fan", 4)  # g1 hosts 0, 1; g2 hosts 2, 3
    for i in range(13):
        sent = http.post("/v1/topics/Fan/messages", json={"body": f"a{i}", "queue_id": 0})
        assert sent.status_code == 201
    delivered = group_pull(http, 4) + group_pull(http, 4)  # 2 of g1's (of 2), 3 (of 3)
    delivered += group_pull(http, 4) + group_pull(http, 4)  # g1 alone: 4 of 4, twice
    assert sorted(delivered) == sorted(f"a{i}" for i in range(13))


def test_a_first_round_that_finds_nothing_goes_on_to_the_group_left(cluster: Cluster) -> None:
    http = cluster.http
    probe_rarely(cluster)
    fill_g1_in_full_shares(http)
    for i in range(3):
        sent = http.post("/v1/topics/Fan/messages", json={"body": f"b{i}", "queue_id": 2})
        assert sent.status_code == 201

    got = group_pull(http, 4)  # g1 has nothing: the round goes on to g2, in the same pull

    assert got and all(body.startswith("b") for body in got)
    while rest := group_pull(http, 4):
        got += rest
    assert sorted(got) == ["b0", "b1", "b2"]


def test_a_long_poll_after_an_empty_first_round_gets_what_arrives(cluster: Cluster) -> None:
    http = cluster.http
    probe_rarely(cluster)
    fill_g1_in_full_shares(http)
    late = threading.Timer(
        0.3, lambda: httpx.post(f"{cluster.b.url}/v1/topics/Fan/messages", json={"body": "late"})
    )
    late.start()
    try:
        started = time.monotonic()
        assert group_pull(http, 4, wait_ms=20_000) == ["late"]
        assert time.monotonic() - started < 15  # answered when it arrived, not at the wait's end
    finally:
        late.join()


def receive(http: httpx.Client, max_messages: int) -> httpx.Response:
    return http.post(
        "/v1/groups/P/topics/Warm/receive",
        json={"max_messages": max_messages, "invisible_ms": 1500},
    )


def test_a_warm_receive_not_answered_asks_only_the_groups_left(
    cluster: Cluster, hop: FaultyHop
) -> None:
    http = cluster.http
    probe_rarely(cluster)
    for i in range(6):
        assert send_to_g2(http, f"p{i}").status_code == 201
    first = receive(http, 2)  # shared evenly: g1 has nothing and is drained
    second = receive(http, 2)  # g1's one probe
    third = receive(http, 2)  # g2 alone: the lean lane
    bodies = [m["body"] for a in (first, second, third) for m in a.json()["messages"]]
    assert len(bodies) == 4 and all(a.status_code == 200 for a in (first, second, third))
    asked = hop.requests
    hop.plan.append("lose")  # g2 pops the last two; its answer never reaches the proxy

    lost = receive(http, 2)

    assert lost.status_code == 200, lost.text
    assert lost.json()["messages"] == []  # g1, the group left, had nothing
    assert hop.requests == asked + 1  # g2 was not asked again: its pop is hidden, not doubled

    # The two popped and lost come back once their invisibility ends.
    seen = set(bodies)

    def redelivered() -> bool:
        seen.update(m["body"] for m in receive(http, 2).json()["messages"])
        return len(seen) == 6

    wait_until(redelivered, timeout=60)
    assert seen == {f"p{i}" for i in range(6)}

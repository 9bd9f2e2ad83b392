"""The proxy's lean lane against the endpoint's way, at its edges: what the lane takes from the
upstream pool (a keep-alive connection and its slot) comes back whatever becomes of the request.

Real etcd, real brokers, the proxy on uvicorn in this process (its pool is looked at directly:
a slot not given back shows nowhere else until all of them are gone)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from app.proxy.protocol import find_lane

from app.proxy.upstream import Upstream
from tests.app.test_proxy import Cluster, create_topic, two_groups
from tests.conftest import LiveServer, wait_until


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    yield from two_groups(tmp_path)


def upstream_of(cluster: Cluster) -> Upstream:
    lane = find_lane(cluster.proxy.server.config.loaded_app)
    assert lane is not None
    upstream: Upstream = lane.app.state.forwarder.upstream
    return upstream


def origin_of(live: LiveServer) -> tuple[str, int]:
    split = urlsplit(live.url)
    assert split.hostname is not None and split.port is not None
    return split.hostname, split.port


def pool_settled(upstream: Upstream, origin: tuple[str, int]) -> bool:
    """Every slot of ``origin`` free again and one connection idle."""
    slots = upstream._slots.get(origin)
    idle = [c for c in upstream._idle.get(origin, []) if not c.closed]
    return slots is not None and slots.free == upstream.max_per_origin and len(idle) == 1


def deep_send(depth: int) -> bytes:
    """A send naming its queue, with a property nested deeper than the proxy can re-encode
    (orjson reads 1024 levels but writes 254): the proxy fails on it after the pick."""
    return b'{"queue_id":2,"body":"x","tags":' + b"[" * depth + b"]" * depth + b"}"


def test_a_warm_send_that_fails_after_its_pick_gives_its_connection_and_slot_back(
    cluster: Cluster,
) -> None:
    http = cluster.http
    create_topic(http, "Deep", 4)  # queues 2, 3 on g2 (broker b)
    upstream, origin = upstream_of(cluster), origin_of(cluster.b)
    for i in range(3):  # the first opens the connection to b; it stays idle, kept alive
        sent = http.post("/v1/topics/Deep/messages", json={"body": f"m{i}", "queue_id": 2})
        assert sent.status_code == 201, sent.text
    wait_until(lambda: pool_settled(upstream, origin))

    failed = http.post(
        "/v1/topics/Deep/messages",
        content=deep_send(300),
        headers={"content-type": "application/json"},
    )

    assert failed.status_code == 422, failed.text  # a client's mistake, both ways
    assert failed.json()["code"] == "VALIDATION_FAILED"
    # The connection the lane took (nothing was written on it) and its slot are back: a
    # slot kept is kept for good, and with max_per_origin of them kept every request to b waits
    # for one and gets 503.
    wait_until(lambda: pool_settled(upstream, origin), timeout=2)
    sent = http.post("/v1/topics/Deep/messages", json={"body": "after", "queue_id": 2})
    assert sent.status_code == 201, sent.text


def test_a_lean_long_poll_whose_client_left_is_seen_through_before_the_proxy_exits(
    cluster: Cluster,
) -> None:
    """uvicorn's graceful shutdown waits for open connections, then for the server's tasks: a
    request on the endpoint's way whose client left is a task, and its broker exchange ends
    (its connection pooled, then closed by the app's shutdown) before the proxy exits."""
    http = cluster.http
    create_topic(http, "Bye", 4)  # queue 0 on g1 (broker a), empty
    upstream, origin = upstream_of(cluster), origin_of(cluster.a)
    assert http.get("/v1/topics/Bye/queues/0/messages").status_code == 200  # warm
    wait_until(lambda: pool_settled(upstream, origin))
    warm = upstream._idle[origin][-1]
    split = urlsplit(cluster.proxy.url)
    assert split.hostname is not None and split.port is not None
    with socket.create_connection((split.hostname, split.port), timeout=20) as sock:
        sock.sendall(
            b"GET /v1/topics/Bye/queues/0/messages?wait_ms=2000 HTTP/1.1\r\nhost: p\r\n\r\n"
        )
        wait_until(lambda: not upstream._idle.get(origin))  # the long-poll is on `warm`
    cluster.http.close()  # no client connection is left open

    cluster.proxy.stop()

    assert warm.closed  # answered, given back and closed with the pool


def test_a_pull_that_declares_a_body_is_answered_without_waiting_for_it(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Body", 4)
    assert http.get("/v1/topics/Body/queues/0/messages").status_code == 200  # warm
    split = urlsplit(cluster.proxy.url)
    assert split.hostname is not None and split.port is not None
    with socket.create_connection((split.hostname, split.port), timeout=20) as sock:
        sock.sendall(
            b"GET /v1/topics/Body/queues/0/messages HTTP/1.1\r\nhost: proxy\r\n"
            b"content-length: 4\r\n\r\n"
        )
        # A bound on the wait (the proxy's body deadline is 30 s), not a timing assertion.
        head = sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200 "), head

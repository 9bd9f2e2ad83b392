"""The proxy app (:mod:`app.proxy.main`) as ``spoolmq proxy`` serves it: its route table from
etcd (and what it does while etcd is away), the HTTP shell every answer passes through
(request ids, problem answers), and the operations clients call in loops served straight from
their endpoints."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import pytest

from app.proxy import main
from app.proxy.context import ProxyLimits
from app.server import ServerLimits
from tests.app.proxy.support import (
    Cluster,
    create_topic,
    exchange,
    is_problem,
    read_message,
    send,
    start_proxy,
    statuses,
)
from tests.conftest import wait_until


def test_with_etcd_down_the_proxy_keeps_routing_on_its_last_view(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Kept", 4)
    cluster.etcd.stop()
    assert send(http, "Kept", "still routed", queue_id=3)["queue_id"] == 3
    assert http.get("/v1/topics/Kept/queues/3/messages").json()["messages"][0]["body"] == (
        "still routed"
    )
    refused = http.put("/v1/topics/New", json={"write_queue_nums": 2})
    is_problem(refused, 503, "ETCD_UNAVAILABLE")
    assert refused.headers["retry-after"] == "1"


def test_every_answer_carries_the_request_id_the_broker_saw(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Ids", 4)
    sent = http.post("/v1/topics/Ids/messages", json={"body": "x"}, headers={"X-Request-Id": "r-1"})
    assert (sent.status_code, sent.headers["x-request-id"]) == (201, "r-1")
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
    group = http.get(
        "/v1/groups/G/topics/Ids/messages?max_messages=0", headers={"X-Request-Id": "gp-1"}
    )
    assert is_problem(group, 422, "VALIDATION_FAILED")["request_id"] == "gp-1"
    pop = http.post(
        "/v1/groups/G/topics/Ids/receive",
        json={"max_messages": 0},
        headers={"X-Request-Id": "rc-1"},
    )
    assert is_problem(pop, 422, "VALIDATION_FAILED")["request_id"] == "rc-1"


# ================================================================ served from their endpoints


def headers_of(answer: httpx.Response) -> list[tuple[str, str]]:
    return [(k, v) for k, v in answer.headers.multi_items() if k != "date"]


def comparable(answer: httpx.Response) -> bytes | list[Any]:
    """An answer's body; a group pull's messages in one order (the groups it asks first
    change from one pull to the next)."""
    if answer.status_code == 200 and "/groups/" in answer.url.path:
        found = answer.json()
        return sorted(
            orjson.dumps(item, option=orjson.OPT_SORT_KEYS)
            for item in (*found["messages"], *found["queues"])
        )
    return answer.content


def test_operations_served_from_their_endpoints_answer_as_the_router_would_serve_them(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sends, pulls, group pulls and receives are served straight from their endpoints; the
    same app with FastAPI dispatching them answers the same bytes, errors included."""
    monkeypatch.setattr(main, "DIRECT_OPERATIONS", frozenset())
    routed = start_proxy(cluster.etcd.url)
    try:
        direct, by_fastapi = cluster.http, httpx.Client(base_url=routed.url, timeout=40)
        with by_fastapi:
            create_topic(direct, "Same", 4)  # g1 hosts 0, 1; g2 hosts 2, 3
            for i in range(8):
                send(direct, "Same", f"m{i}", queue_id=i % 4)
            deep = b'{"queue_id":2,"tags":%s%s}' % (b"[" * 300, b"]" * 300)
            requests: list[tuple[str, str, dict[str, Any]]] = [
                ("GET", "/v1/topics/Same/queues/2/messages", {"params": {"max_messages": 5}}),
                ("GET", "/v1/topics/Same/queues/0/messages", {"params": {"offset": 1}}),
                ("GET", "/v1/topics/Same/queues/9/messages", {}),  # no such queue
                ("GET", "/v1/topics/Same/queues/1/messages", {"params": {"max_messages": "x"}}),
                ("GET", "/v1/topics/Same/queues/x/messages", {}),  # not a number
                ("GET", f"/v1/topics/Same/queues/{'9' * 5000}/messages", {}),
                ("GET", "/v1/topics/Nope/queues/0/messages", {}),
                ("GET", "/v1/groups/G/topics/Nope/messages", {}),
                ("GET", "/v1/groups/G/topics/Same/messages", {"params": {"max_messages": 32}}),
                ("GET", "/v1/groups/G/topics/Same/messages", {"params": {"max_messages": 0}}),
                ("GET", "/v1/groups/G/topics/Same/messages", {"params": {"wait_ms": "x"}}),
                ("POST", "/v1/topics/Nope/messages", {"json": {"body": "x"}}),
                ("POST", "/v1/topics/Same/messages", {"content": b"{not json"}),
                ("POST", "/v1/topics/Same/messages", {"json": {"body": "x", "queue_id": 99}}),
                ("POST", "/v1/topics/Same/messages", {"json": {"body": "x", "queue_id": -1}}),
                ("POST", "/v1/topics/Same/messages", {"content": deep}),
                ("POST", "/v1/groups/G/topics/Same/receive", {"content": b"[1]"}),
                ("POST", "/v1/groups/G/topics/Nope/receive", {"json": {}}),
                ("POST", "/v1/groups/G/topics/Same/receive", {"json": {"max_messages": 0}}),
            ]
            for index, (method, path, kwargs) in enumerate(requests):
                headers = {"X-Request-Id": f"same-{index}", "Content-Type": "application/json"}
                one = direct.request(method, path, headers=headers, **kwargs)
                other = by_fastapi.request(method, path, headers=headers, **kwargs)
                assert one.status_code == other.status_code, (path, one.text, other.text)
                assert headers_of(one) == headers_of(other), path
                assert comparable(one) == comparable(other), path
    finally:
        routed.stop()


# ================================================================ served by spoolmq's server


def test_pipelined_requests_are_answered_in_order_and_close_is_honoured(cluster: Cluster) -> None:
    create_topic(cluster.http, "Pipe", 4)
    for i in range(3):
        send(cluster.http, "Pipe", f"p{i}", queue_id=0)
    ask = "GET /v1/topics/Pipe/queues/0/messages?offset=%d HTTP/1.1\r\nHost: p\r\n%s\r\n"
    wire = (ask % (0, "") + ask % (2, "") + ask % (1, "Connection: close\r\n")).encode()
    received = exchange(cluster.proxy.url, wire)  # the proxy closes after the third answer
    answers = received.split(b"HTTP/1.1 ")[1:]
    assert statuses(received) == [b"200"] * 3
    assert [a.count(b'"body":"p') for a in answers] == [3, 1, 2]
    assert b"connection: close" in answers[2].lower() and b"connection: close" not in answers[0]


def send_head(topic: str, length: int, extra: str = "") -> bytes:
    return (
        f"POST /v1/topics/{topic}/messages HTTP/1.1\r\nHost: p\r\n{extra}"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_a_send_whose_body_arrives_in_pieces_is_forwarded_whole(cluster: Cluster) -> None:
    create_topic(cluster.http, "Pieces", 4)
    body = json.dumps({"body": "z" * 200_000, "tags": "P", "queue_id": 1}).encode()
    url = httpx.URL(cluster.proxy.url)
    assert url.port is not None
    with socket.create_connection((url.host, url.port), timeout=20) as sock:
        sock.sendall(send_head("Pieces", len(body)) + body[:10])
        time.sleep(0.1)  # the client pauses between its writes
        sock.sendall(body[10:150_000])
        time.sleep(0.1)
        sock.sendall(
            body[150_000:] + b"GET /healthz HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert statuses(received) == [b"201", b"200"], received[:500]
    pulled = cluster.http.get("/v1/topics/Pieces/queues/1/messages").json()
    assert [(m["body"], m["tags"]) for m in pulled["messages"]] == [("z" * 200_000, "P")]


def test_pipelined_sends_each_reach_the_broker_whole(cluster: Cluster) -> None:
    """Sends written in one go: the second's body is read while the first is answered."""
    create_topic(cluster.http, "PipeSend", 4)
    bodies = [json.dumps({"body": c * 90_000, "queue_id": 2}).encode() for c in "ab"]
    wire = send_head("PipeSend", len(bodies[0])) + bodies[0]
    wire += send_head("PipeSend", len(bodies[1]), "Connection: close\r\n") + bodies[1]
    received = exchange(cluster.proxy.url, wire)
    assert statuses(received) == [b"201", b"201"], received[:500]
    pulled = cluster.http.get("/v1/topics/PipeSend/queues/2/messages").json()
    assert [m["body"] for m in pulled["messages"]] == ["a" * 90_000, "b" * 90_000]


def test_a_send_that_expects_100_continue_gets_it_before_its_body(cluster: Cluster) -> None:
    create_topic(cluster.http, "Cont", 4)
    body = json.dumps({"body": "c", "queue_id": 3}).encode()
    head = send_head("Cont", len(body), "X-Request-Id: cont-1\r\nExpect: 100-continue\r\n")
    url = httpx.URL(cluster.proxy.url)
    assert url.port is not None
    with socket.create_connection((url.host, url.port), timeout=20) as sock:
        sock.sendall(head)
        continued = b""
        while b"\r\n\r\n" not in continued:
            continued += sock.recv(65536)
        assert continued == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body + b"GET /healthz HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert statuses(received) == [b"201", b"200"], received[:500]
    assert b"x-request-id: cont-1" in received.split(b"\r\n\r\n")[0].split(b"\r\n")
    pulled = cluster.http.get("/v1/topics/Cont/queues/3/messages").json()
    assert [m["body"] for m in pulled["messages"]] == ["c"]


def test_a_request_id_is_echoed_when_it_is_one_and_made_otherwise(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Rid", 4)
    made: set[str] = set()
    for given, echoed in (("rid-ok.1", True), ("bad id with spaces", False), (None, False)):
        extra = {} if given is None else {"X-Request-Id": given}
        for answer in (
            http.post("/v1/topics/Rid/messages", json={"body": "r"}, headers=extra),
            http.get("/v1/topics/Rid/route", headers=extra),
        ):
            assert answer.is_success, answer.text
            request_id = answer.headers["x-request-id"]
            assert (request_id == given) is echoed and request_id
            made.add(request_id)
        # the broker got the same id (a problem answer names it)
        problem = http.post(
            "/v1/topics/Rid/messages", json={"body": "r", "queue_id": 9}, headers=extra
        )
        assert problem.json()["request_id"] == problem.headers["x-request-id"]
    assert len(made) == 5  # one for each request without a good id of its own


def test_a_client_gone_mid_body_sends_nothing_and_the_proxy_serves_on(cluster: Cluster) -> None:
    create_topic(cluster.http, "Gone", 4)
    body = json.dumps({"body": "g" * 50_000, "queue_id": 0}).encode()
    url = httpx.URL(cluster.proxy.url)
    assert url.port is not None
    with socket.create_connection((url.host, url.port), timeout=20) as sock:
        sock.sendall(send_head("Gone", len(body)) + body[:20_000])
    assert send(cluster.http, "Gone", "after", queue_id=0)["queue_id"] == 0
    pulled = cluster.http.get("/v1/topics/Gone/queues/0/messages").json()
    assert [m["body"] for m in pulled["messages"]] == ["after"]
    again = (
        b"GET /v1/topics/Gone/queues/0/messages HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
    )
    assert exchange(cluster.proxy.url, again).startswith(b"HTTP/1.1 200 ")


def test_a_body_over_the_limit_is_413_and_a_chunked_one_is_read_whole(cluster: Cluster) -> None:
    http = cluster.http
    create_topic(http, "Odd", 4)
    over = ProxyLimits().max_request_bytes + 1
    received = exchange(cluster.proxy.url, send_head("Odd", over) + b"{")  # 413 closes
    assert received.startswith(b"HTTP/1.1 413 ") and b"REQUEST_TOO_LARGE" in received

    def chunks() -> Iterator[bytes]:
        yield b'{"body": '
        yield b'"chunked", "queue_id": 0}'

    chunked = http.post(
        "/v1/topics/Odd/messages", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert chunked.status_code == 201, chunked.text
    encoded = http.get("/v1/topics/O%64d/queues/0/messages")  # a percent escape in the path
    assert [m["body"] for m in encoded.json()["messages"]] == ["chunked"]


def test_a_pull_that_declares_a_body_is_answered_without_waiting_for_it(cluster: Cluster) -> None:
    create_topic(cluster.http, "Body", 4)
    head = (
        b"GET /v1/topics/Body/queues/0/messages HTTP/1.1\r\nhost: proxy\r\n"
        b"content-length: 4\r\n\r\n"
    )
    # A bound on the wait (the server's body deadline is 30 s), not a timing assertion.
    assert exchange(cluster.proxy.url, head, until=b"\r\n\r\n").startswith(b"HTTP/1.1 200 ")


def test_a_proxy_stopped_during_a_long_poll_whose_client_left_stops_and_closes_its_connections(
    cluster: Cluster,
) -> None:
    """The server's graceful shutdown waits for (or cancels) the request in progress; its
    broker exchange ends, and the app's shutdown closes its connection to the broker."""
    http = cluster.http
    create_topic(http, "Bye", 4)  # queue 0 on g1 (broker a), empty
    upstream = cluster.proxy.parts.forwarder.upstream
    split = urlsplit(cluster.a.url)
    origin = (split.hostname or "", split.port or 0)
    assert http.get("/v1/topics/Bye/queues/0/messages").status_code == 200
    wait_until(lambda: len(upstream._idle.get(origin, [])) == 1)
    kept = upstream._idle[origin][-1]
    url = httpx.URL(cluster.proxy.url)
    assert url.port is not None
    with socket.create_connection((url.host, url.port), timeout=20) as sock:
        sock.sendall(
            b"GET /v1/topics/Bye/queues/0/messages?wait_ms=2000 HTTP/1.1\r\nhost: p\r\n\r\n"
        )
        wait_until(lambda: not upstream._idle.get(origin))  # the long-poll is on `kept`
    http.close()  # no client connection is left open

    cluster.proxy.stop()

    assert kept.closed


# ================================================================ slow clients


QUICK = ServerLimits(header_timeout_s=0.5, body_timeout_s=0.5, max_header_bytes=8 * 1024)
"""The server's deadlines, short enough for a test."""


@pytest.fixture
def quick(cluster: Cluster) -> Iterator[httpx.Client]:
    """A client of a proxy of ``cluster`` served with :data:`QUICK` limits."""
    proxy = start_proxy(cluster.etcd.url, server_limits=QUICK)
    try:
        with httpx.Client(base_url=proxy.url, timeout=30) as http:
            yield http
    finally:
        proxy.stop()


def test_a_send_whose_body_stalls_gets_408_and_nothing_is_stored(
    cluster: Cluster, quick: httpx.Client
) -> None:
    create_topic(quick, "Stall", 4)
    body = json.dumps({"body": "s" * 5_000, "queue_id": 0}).encode()
    answer = exchange(str(quick.base_url), send_head("Stall", len(body)) + body[:1_000])
    head, _, problem = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"connection: close" in head.lower()
    details = json.loads(problem)
    assert details["code"] == "REQUEST_TIMEOUT"
    assert details["request_id"]
    assert cluster.http.get("/v1/topics/Stall/queues/0/messages").json()["messages"] == []
    assert send(quick, "Stall", "after", queue_id=0)["queue_id"] == 0  # the proxy serves on


def test_a_stalled_body_of_any_route_gets_408(quick: httpx.Client) -> None:
    create_topic(quick, "Slow", 4)
    body = json.dumps({"message": {"body": "h"}, "producer_group": "P"}).encode()
    head = (
        "POST /v1/topics/Slow/transactions HTTP/1.1\r\nHost: p\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    answer = exchange(str(quick.base_url), head + body[:5])
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_headers_that_never_end_get_408_and_too_many_get_431(quick: httpx.Client) -> None:
    url = str(quick.base_url)
    unfinished = exchange(url, b"GET /v1/topics HTTP/1.1\r\nHost: p\r\n")
    assert unfinished.startswith(b"HTTP/1.1 408 "), unfinished[:200]
    big = b"GET /v1/topics HTTP/1.1\r\nHost: p\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    refused = exchange(url, big)
    assert refused.startswith(b"HTTP/1.1 431 "), refused[:200]
    assert quick.get("/v1/topics").status_code == 200


def test_a_keep_alive_connection_busy_past_the_deadlines_is_not_cut_off(
    quick: httpx.Client,
) -> None:
    """Each request gets its own deadlines: one connection serving requests for longer than a
    header or body deadline, with pauses between them, is never answered 408."""
    create_topic(quick, "Busy", 4)
    url = quick.base_url
    assert url.port is not None
    body = json.dumps({"body": "b", "queue_id": 1}).encode()
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        buffer = bytearray()
        for _ in range(6):  # six pauses of 0.3 s: three times the deadlines
            sock.sendall(send_head("Busy", len(body)) + body)
            answer = read_message(sock, buffer)
            assert answer is not None and answer.startswith(b"HTTP/1.1 201 "), answer
            time.sleep(0.3)
    pulled = quick.get("/v1/topics/Busy/queues/1/messages").json()
    assert [m["body"] for m in pulled["messages"]] == ["b"] * 6


def test_an_idle_connection_is_closed_after_the_keep_alive_and_a_busy_one_is_not(
    cluster: Cluster,
) -> None:
    # A keep-alive long enough for the test's next write to come in time on a busy machine.
    proxy = start_proxy(cluster.etcd.url, server_limits=ServerLimits(keep_alive_timeout_s=1.0))
    ask = b"GET /healthz HTTP/1.1\r\nHost: p\r\n\r\n"
    url = httpx.URL(proxy.url)
    assert url.port is not None
    try:
        with socket.create_connection((url.host, url.port), timeout=30) as sock:
            buffer = bytearray()
            for _ in range(3):
                sock.sendall(ask)
                answer = read_message(sock, buffer)
                assert answer is not None and answer.startswith(b"HTTP/1.1 200 ")
            sock.sendall(ask[:10])  # a request under way: the connection is not idle
            time.sleep(2.0)
            sock.sendall(ask[10:])
            answer = read_message(sock, buffer)
            assert answer is not None and answer.startswith(b"HTTP/1.1 200 ")
            assert sock.recv(65536) == b""  # idle: closed by the proxy
    finally:
        proxy.stop()

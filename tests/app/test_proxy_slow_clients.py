"""Slow and stalled clients against the proxy: held to the brokers' limits
(:class:`~app.server.GuardedHttpToolsProtocol`) on the ASGI way and on the hot routes alike.
A real etcd, two real brokers and a proxy served by :class:`ProxyHttpProtocol` with short
deadlines, all on 127.0.0.1; raw sockets play the slow clients."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from app.proxy.protocol import ProxyHttpProtocol

from tests.app.test_proxy import Cluster, create_topic, start_proxy, two_groups


class QuickProtocol(ProxyHttpProtocol):
    """The proxy's protocol with deadlines short enough for a test."""

    header_timeout_s = 0.5
    body_timeout_s = 0.5
    max_header_bytes = 8 * 1024


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[Cluster, httpx.Client]]:
    deployment = two_groups(tmp_path)
    cluster = next(deployment)
    cluster.proxy.stop()  # (stopped again by two_groups: a no-op)
    quick = start_proxy(cluster.etcd.url, http=QuickProtocol)
    try:
        with httpx.Client(base_url=quick.url, timeout=30) as http:
            yield cluster, http
    finally:
        quick.stop()
        next(deployment, None)  # the brokers and etcd stopped


def _answer_then_close(http: httpx.Client, sent: bytes, wait_s: float = 10.0) -> bytes:
    """What the proxy writes back to a raw connection that sent ``sent`` and then nothing,
    up to its close (a timeout here fails the test: the proxy never let go)."""
    url = http.base_url
    assert url.port is not None
    with socket.create_connection((url.host, url.port), timeout=wait_s) as sock:
        sock.sendall(sent)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    return received


def _send_head(topic: str, length: int) -> bytes:
    return (
        f"POST /v1/topics/{topic}/messages HTTP/1.1\r\nHost: p\r\n"
        f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_a_hot_send_whose_body_stalls_gets_408_and_nothing_is_stored(
    proxied: tuple[Cluster, httpx.Client],
) -> None:
    _, http = proxied
    create_topic(http, "Stall", 4)
    body = json.dumps({"body": "s" * 5_000, "queue_id": 0}).encode()
    started = time.monotonic()
    answer = _answer_then_close(http, _send_head("Stall", len(body)) + body[:1_000])
    assert time.monotonic() - started < 8
    head, _, problem = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), answer[:200]
    assert b"connection: close" in head.lower()
    details = json.loads(problem)
    assert details["code"] == "REQUEST_TIMEOUT"
    assert details["request_id"]
    pulled = http.get("/v1/topics/Stall/queues/0/messages", params={"offset": 0}).json()
    assert pulled["messages"] == []
    sent = http.post("/v1/topics/Stall/messages", json={"body": "after", "queue_id": 0})
    assert sent.status_code == 201  # the proxy serves on


def test_a_stalled_body_on_the_asgi_way_gets_408_too(
    proxied: tuple[Cluster, httpx.Client],
) -> None:
    _, http = proxied
    create_topic(http, "Slow", 4)
    body = json.dumps({"message": {"body": "h"}, "producer_group": "P"}).encode()
    head = (
        "POST /v1/topics/Slow/transactions HTTP/1.1\r\nHost: p\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    answer = _answer_then_close(http, head + body[:5])
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]


def test_headers_that_never_end_get_408_and_too_many_get_431(
    proxied: tuple[Cluster, httpx.Client],
) -> None:
    _, http = proxied
    unfinished = _answer_then_close(http, b"GET /v1/topics HTTP/1.1\r\nHost: p\r\n")
    assert unfinished.startswith(b"HTTP/1.1 408 "), unfinished[:200]
    big = b"GET /v1/topics HTTP/1.1\r\nHost: p\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    refused = _answer_then_close(http, big)
    assert refused.startswith(b"HTTP/1.1 431 "), refused[:200]
    assert http.get("/v1/topics").status_code == 200


def test_a_keep_alive_connection_busy_past_the_deadlines_is_not_cut_off(
    proxied: tuple[Cluster, httpx.Client],
) -> None:
    """Each request gets its own deadlines: one connection serving requests for longer than a
    header or body deadline, with pauses between them, is never answered 408."""
    _, http = proxied
    create_topic(http, "Busy", 4)
    url = http.base_url
    assert url.port is not None
    body = json.dumps({"body": "b", "queue_id": 1}).encode()
    with socket.create_connection((url.host, url.port), timeout=10) as sock:
        started = time.monotonic()
        while time.monotonic() - started < 1.6:  # three times the deadlines
            sock.sendall(_send_head("Busy", len(body)) + body)
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 201 "), answer[:200]
            head, _, rest = answer.partition(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            while len(rest) < length:
                rest += sock.recv(65536)
            time.sleep(0.2)

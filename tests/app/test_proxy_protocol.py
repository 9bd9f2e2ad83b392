"""The proxy's hot routes answered below ASGI (:mod:`app.proxy.protocol`) against the plain
ASGI way: a real etcd, two real brokers and two real proxies on 127.0.0.1, one served as
``spoolmq proxy`` serves it, one with uvicorn's own httptools protocol. Same requests, same
answers: status, headers, bodies, error answers."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import uvicorn
from app.proxy.protocol import ProxyHttpProtocol
from uvicorn.server import ServerState

from app.proxy.context import ProxyLimits
from tests.app.test_proxy import Cluster, create_topic, start_proxy, two_groups


class CountingProtocol(ProxyHttpProtocol):
    """The proxy's protocol, noting which requests took the fast way."""

    hot: ClassVar[list[str]] = []

    def _hot(self, scope: Any) -> tuple[Any, ...] | None:
        found = super()._hot(scope)
        if found is not None:
            self.hot.append(f"{scope['method']} {scope['path']}")
        return found


@dataclass
class Both:
    cluster: Cluster
    fast: httpx.Client  # the proxy as spoolmq proxy serves it (counting its fast answers)
    asgi: httpx.Client  # the same app, served the plain ASGI way


@pytest.fixture
def both(tmp_path: Path) -> Iterator[Both]:
    deployment = two_groups(tmp_path)
    cluster = next(deployment)
    cluster.proxy.stop()  # (stopped again by two_groups: a no-op)
    fast = start_proxy(cluster.etcd.url, http=CountingProtocol)
    try:
        asgi = start_proxy(cluster.etcd.url, http="httptools")
        try:
            with (
                httpx.Client(base_url=fast.url, timeout=40) as fast_http,
                httpx.Client(base_url=asgi.url, timeout=40) as asgi_http,
            ):
                CountingProtocol.hot.clear()
                yield Both(cluster, fast_http, asgi_http)
        finally:
            asgi.stop()
    finally:
        fast.stop()
        next(deployment, None)  # the brokers and etcd stopped


def headers(answer: httpx.Response) -> list[tuple[str, str]]:
    return [(k, v) for k, v in answer.headers.multi_items() if k != "date"]


def same(fast: httpx.Response, asgi: httpx.Response) -> None:
    assert fast.status_code == asgi.status_code, (fast.text, asgi.text)
    assert headers(fast) == headers(asgi)
    assert fast.content == asgi.content


def test_pulls_and_errors_answer_byte_for_byte_as_the_asgi_way(both: Both) -> None:
    create_topic(both.fast, "Same", 4)  # g1 hosts 0, 1; g2 hosts 2, 3
    for i in range(8):
        sent = both.fast.post("/v1/topics/Same/messages", json={"body": f"m{i}", "queue_id": i % 4})
        assert sent.status_code == 201
    rid = {"X-Request-Id": "same-request-1"}
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/v1/topics/Same/queues/2/messages", {"params": {"max_messages": 5}}),
        ("GET", "/v1/topics/Same/queues/0/messages", {"params": {"offset": 1}}),
        ("GET", "/v1/topics/Same/queues/9/messages", {}),  # no such queue
        ("GET", "/v1/topics/Same/queues/1/messages", {"params": {"max_messages": "x"}}),
        ("GET", "/v1/topics/Same/queues/x/messages", {}),  # not a number: FastAPI's 422
        ("GET", "/v1/topics/Nope/queues/0/messages", {}),
        ("GET", "/v1/groups/G/topics/Nope/messages", {}),
        ("GET", "/v1/groups/G/topics/Same/messages", {"params": {"max_messages": 0}}),
        ("POST", "/v1/topics/Nope/messages", {"json": {"body": "x"}}),
        ("POST", "/v1/topics/Same/messages", {"content": b"{not json"}),
        ("POST", "/v1/topics/Same/messages", {"json": {"body": "x", "queue_id": 99}}),
        ("POST", "/v1/topics/Same/messages", {"json": {"body": "x", "queue_id": -1}}),
        # nested deeper than the proxy can encode again (it reads 1024 levels, writes 254)
        (
            "POST",
            "/v1/topics/Same/messages",
            {"content": b'{"queue_id":2,"tags":%s%s}' % (b"[" * 300, b"]" * 300)},
        ),
        ("POST", "/v1/groups/G/topics/Same/receive", {"content": b"[1]"}),
        ("POST", "/v1/groups/G/topics/Nope/receive", {"json": {}}),
        ("POST", "/v1/groups/G/topics/Same/receive", {"json": {"max_messages": 0}}),
    ]
    for method, path, kwargs in requests:
        extra = kwargs.pop("headers", {"Content-Type": "application/json"})
        options = {**kwargs, "headers": {**rid, **extra}}
        same(both.fast.request(method, path, **options), both.asgi.request(method, path, **options))

    hot = CountingProtocol.hot
    assert "GET /v1/topics/Same/queues/2/messages" in hot
    assert "GET /v1/groups/G/topics/Nope/messages" in hot
    assert "POST /v1/topics/Nope/messages" in hot
    assert "POST /v1/groups/G/topics/Same/receive" in hot
    assert not any("/queues/x/" in request for request in hot)  # FastAPI's way, as before


def test_sends_group_pulls_and_receives_answer_as_the_asgi_way(both: Both) -> None:
    create_topic(both.fast, "Flow", 4)
    fast = both.fast.post("/v1/topics/Flow/messages", json={"body": "a", "queue_id": 2})
    asgi = both.asgi.post("/v1/topics/Flow/messages", json={"body": "b", "queue_id": 2})
    assert fast.status_code == asgi.status_code == 201
    assert [k for k, _ in headers(fast)] == [k for k, _ in headers(asgi)]
    mine, theirs = fast.json()["messages"][0], asgi.json()["messages"][0]
    assert mine.keys() == theirs.keys()
    assert mine["queue_id"] == theirs["queue_id"] == 2
    assert fast.json()["broker_group"] == asgi.json()["broker_group"] == "g2"
    assert theirs["queue_offset"] == mine["queue_offset"] + 1
    raw = both.fast.post(
        "/v1/topics/Flow/messages",
        params={"queue_id": 1, "tag": "t"},
        content=b"raw bytes",
        headers={"Content-Type": "application/octet-stream", "Idempotency-Key": "k-1"},
    )
    again = both.asgi.post(
        "/v1/topics/Flow/messages",
        params={"queue_id": 1, "tag": "t"},
        content=b"raw bytes",
        headers={"Content-Type": "application/octet-stream", "Idempotency-Key": "k-1"},
    )
    assert raw.status_code == again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert raw.json()["messages"] == again.json()["messages"]
    for i in range(6):
        both.fast.post("/v1/topics/Flow/messages", json={"body": f"f{i}", "queue_id": i % 4})

    def bodies(answer: httpx.Response) -> list[str]:
        assert answer.status_code == 200, answer.text
        return sorted(m["body"] for m in answer.json()["messages"])

    pull: dict[str, Any] = {"params": {"max_messages": 32}, "headers": {"X-Request-Id": "gp"}}
    fast_pull = both.fast.get("/v1/groups/G/topics/Flow/messages", **pull)
    asgi_pull = both.asgi.get("/v1/groups/G/topics/Flow/messages", **pull)
    assert bodies(fast_pull) == bodies(asgi_pull) and len(bodies(fast_pull)) == 9
    assert headers(fast_pull) == headers(asgi_pull)
    receive: dict[str, Any] = {"json": {"max_messages": 32}, "headers": {"X-Request-Id": "rc"}}
    fast_pop = both.fast.post("/v1/groups/P1/topics/Flow/receive", **receive)
    asgi_pop = both.asgi.post("/v1/groups/P2/topics/Flow/receive", **receive)
    assert bodies(fast_pop) == bodies(asgi_pop) and len(bodies(fast_pop)) == 9
    assert [k for k, _ in headers(fast_pop)] == [k for k, _ in headers(asgi_pop)]
    assert {"POST /v1/topics/Flow/messages", "GET /v1/groups/G/topics/Flow/messages"} <= set(
        CountingProtocol.hot
    )


def test_what_the_shell_treats_specially_takes_the_asgi_way(both: Both) -> None:
    create_topic(both.fast, "Odd", 4)
    host, port = both.fast.base_url.host, both.fast.base_url.port
    assert port is not None
    over = ProxyLimits().max_request_bytes + 1
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall(
            b"POST /v1/topics/Odd/messages HTTP/1.1\r\nHost: p\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n{" % over
        )
        received = b""
        while chunk := sock.recv(65536):  # 413 closes the connection
            received += chunk
    assert received.startswith(b"HTTP/1.1 413 ") and b"REQUEST_TOO_LARGE" in received

    def chunks() -> Iterator[bytes]:
        yield b'{"body": '
        yield b'"chunked"}'

    chunked = both.fast.post(
        "/v1/topics/Odd/messages", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert chunked.status_code == 201
    encoded = both.fast.get("/v1/topics/O%64d/queues/0/messages")  # a percent escape
    assert encoded.status_code == 200
    anonymous = both.fast.get("/v1/topics/Odd/queues/0/messages")
    problem = both.fast.get("/v1/topics/Odd/queues/7/messages")
    assert anonymous.headers["x-request-id"] != problem.headers["x-request-id"]
    assert problem.json()["request_id"] == problem.headers["x-request-id"]
    assert CountingProtocol.hot == [
        "GET /v1/topics/Odd/queues/0/messages",
        "GET /v1/topics/Odd/queues/7/messages",
    ]


def test_pipelined_requests_are_answered_in_order_and_close_is_honoured(both: Both) -> None:
    create_topic(both.fast, "Pipe", 4)
    for i in range(3):
        both.fast.post("/v1/topics/Pipe/messages", json={"body": f"p{i}", "queue_id": 0})
    host, port = both.fast.base_url.host, both.fast.base_url.port
    assert port is not None
    ask = "GET /v1/topics/Pipe/queues/0/messages?offset=%d HTTP/1.1\r\nHost: p\r\n%s\r\n"
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall((ask % (0, "") + ask % (2, "") + ask % (1, "Connection: close\r\n")).encode())
        received = b""
        while chunk := sock.recv(65536):  # the proxy closes after the third answer
            received += chunk
    answers = received.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"200"] * 3
    assert [a.count(b'"body":"p') for a in answers] == [3, 1, 2]
    assert b"connection: close" in answers[2].lower() and b"connection: close" not in answers[0]


def test_a_send_whose_body_arrives_in_pieces_is_forwarded_whole(both: Both) -> None:
    """The hot way reads the body itself: a body in three writes, the client pausing between
    them, reaches the broker whole, as one message, and answers as the ASGI way does."""
    create_topic(both.fast, "Pieces", 4)
    body = json.dumps({"body": "z" * 200_000, "tags": "P", "queue_id": 1}).encode()
    host, port = both.fast.base_url.host, both.fast.base_url.port
    assert port is not None
    head = (
        "POST /v1/topics/Pieces/messages HTTP/1.1\r\nHost: p\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall(head.encode() + body[:10])
        time.sleep(0.1)
        sock.sendall(body[10:150_000])
        time.sleep(0.1)
        sock.sendall(
            body[150_000:] + b"GET /healthz HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n"
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    answers = received.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"201", b"200"], received[:500]
    assert "POST /v1/topics/Pieces/messages" in CountingProtocol.hot
    pulled = both.asgi.get("/v1/topics/Pieces/queues/1/messages", params={"offset": 0}).json()
    assert [(m["body"], m["tags"]) for m in pulled["messages"]] == [("z" * 200_000, "P")]


def test_pipelined_sends_each_reach_the_broker_whole(both: Both) -> None:
    """Sends written in one go: the second's body is read while the first is answered."""
    create_topic(both.fast, "PipeSend", 4)
    host, port = both.fast.base_url.host, both.fast.base_url.port
    assert port is not None
    bodies = [json.dumps({"body": c * 90_000, "queue_id": 2}).encode() for c in "ab"]
    ask = (
        "POST /v1/topics/PipeSend/messages HTTP/1.1\r\nHost: p\r\n%s"
        "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    )
    wire = (ask % ("", len(bodies[0]))).encode() + bodies[0]
    wire += (ask % ("Connection: close\r\n", len(bodies[1]))).encode() + bodies[1]
    with socket.create_connection((host, port), timeout=20) as sock:
        sock.sendall(wire)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    answers = received.split(b"HTTP/1.1 ")[1:]
    assert [a[:3] for a in answers] == [b"201", b"201"], received[:500]
    pulled = both.asgi.get("/v1/topics/PipeSend/queues/2/messages", params={"offset": 0}).json()
    assert [m["body"] for m in pulled["messages"]] == ["a" * 90_000, "b" * 90_000]


def _exchange(url: httpx.URL, wire: bytes, until: bytes = b"") -> bytes:
    """``wire`` written on a new connection; what came back until ``until`` was seen (or the
    proxy closed the connection)."""
    assert url.port is not None
    with socket.create_connection((url.host, url.port), timeout=20) as sock:
        sock.sendall(wire)
        received = b""
        while not (until and until in received) and (chunk := sock.recv(65536)):
            received += chunk
    return received


def _without_dates(answer: bytes) -> bytes:
    return b"\r\n".join(line for line in answer.split(b"\r\n") if not line.startswith(b"date:"))


def test_a_send_that_expects_100_continue_gets_it_first_both_ways(both: Both) -> None:
    """The client waits for ``100 Continue`` before its body: the hot way sends it as uvicorn
    does, and the whole exchange is the ASGI way's, byte for byte but the receipts."""
    create_topic(both.fast, "Cont", 4)
    body = json.dumps({"body": "c", "queue_id": 3}).encode()
    head = (
        "POST /v1/topics/Cont/messages HTTP/1.1\r\nHost: p\r\nX-Request-Id: cont-1\r\n"
        "Content-Type: application/json\r\nExpect: 100-continue\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    answers = []
    for client in (both.fast, both.asgi):
        url = client.base_url
        assert url.port is not None
        with socket.create_connection((url.host, url.port), timeout=20) as sock:
            sock.sendall(head)
            continued = b""
            while b"\r\n\r\n" not in continued:
                continued += sock.recv(65536)
            assert continued == b"HTTP/1.1 100 Continue\r\n\r\n"
            sock.sendall(body)
            received = b""
            while chunk := sock.recv(65536):
                received += chunk
        answers.append(received)
    fast, asgi = (_without_dates(a).split(b"\r\n\r\n", 1) for a in answers)
    # status line and headers, in order, x-request-id echoed; the receipts' lengths differ
    assert _lengths_masked(fast[0]) == _lengths_masked(asgi[0])
    assert b"x-request-id: cont-1" in fast[0]
    assert orjson_keys(fast[1]) == orjson_keys(asgi[1])
    assert "POST /v1/topics/Cont/messages" in CountingProtocol.hot


def _lengths_masked(head: bytes) -> bytes:
    return re.sub(rb"(?m)^content-length: \d+", b"content-length: N", head)


def orjson_keys(body: bytes) -> list[str]:
    return list(json.loads(body).keys())


def test_a_sends_request_id_is_echoed_or_made_as_the_asgi_way_does(both: Both) -> None:
    create_topic(both.fast, "Rid", 4)
    for given, echoed in (("rid-ok.1", True), ("bad id with spaces", False), (None, False)):
        extra = {} if given is None else {"X-Request-Id": given}
        fast = both.fast.post("/v1/topics/Rid/messages", json={"body": "r"}, headers=extra)
        asgi = both.asgi.post("/v1/topics/Rid/messages", json={"body": "r"}, headers=extra)
        assert fast.status_code == asgi.status_code == 201
        assert [k for k, _ in headers(fast)] == [k for k, _ in headers(asgi)]
        for answer in (fast, asgi):
            made = answer.headers["x-request-id"]
            assert (made == given) is echoed and made
        # the broker got the same id (a problem answer names it)
        problem = both.fast.post(
            "/v1/topics/Rid/messages", json={"body": "r", "queue_id": 9}, headers=extra
        )
        assert problem.json()["request_id"] == problem.headers["x-request-id"]
    assert CountingProtocol.hot.count("POST /v1/topics/Rid/messages") == 6


def test_a_client_gone_mid_body_sends_nothing_and_the_proxy_serves_on(both: Both) -> None:
    """A send whose client closes before its body is whole is not forwarded (nothing stored),
    and the proxy answers the next client as before."""
    create_topic(both.fast, "Gone", 4)
    body = json.dumps({"body": "g" * 50_000, "queue_id": 0}).encode()
    head = (
        "POST /v1/topics/Gone/messages HTTP/1.1\r\nHost: p\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    for client in (both.fast, both.asgi):
        url = client.base_url
        assert url.port is not None
        with socket.create_connection((url.host, url.port), timeout=20) as sock:
            sock.sendall(head + body[:20_000])
            time.sleep(0.2)
        time.sleep(0.2)
    assert CountingProtocol.hot.count("POST /v1/topics/Gone/messages") == 1
    sent = both.fast.post("/v1/topics/Gone/messages", json={"body": "after", "queue_id": 0})
    assert sent.status_code == 201
    pulled = both.asgi.get("/v1/topics/Gone/queues/0/messages", params={"offset": 0}).json()
    assert [m["body"] for m in pulled["messages"]] == ["after"]
    pipelined = _exchange(
        both.fast.base_url,
        b"GET /v1/topics/Gone/queues/0/messages HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n",
    )
    assert pipelined.startswith(b"HTTP/1.1 200 ")


async def _hello(scope: Any, receive: Any, send: Any) -> None:
    assert scope["type"] == "http"
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"hi"})


async def _serve_hello(keep_alive_s: float) -> tuple[asyncio.AbstractServer, int]:
    config = uvicorn.Config(_hello, http=ProxyHttpProtocol, timeout_keep_alive=keep_alive_s)  # type: ignore[arg-type]
    config.load()
    state = ServerState()
    server = await asyncio.get_running_loop().create_server(
        lambda: ProxyHttpProtocol(config, state, {}), "127.0.0.1", 0
    )
    return server, server.sockets[0].getsockname()[1]


async def _answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    return await reader.readexactly(2)


async def test_an_idle_connection_is_closed_after_the_keep_alive_and_a_busy_one_is_not() -> None:
    server, port = await _serve_hello(0.1)
    ask = b"GET / HTTP/1.1\r\nHost: p\r\n\r\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        for _ in range(3):
            writer.write(ask)
            assert await _answer(reader) == b"hi"
        writer.write(ask[:10])  # a request under way: the connection is not idle
        await asyncio.sleep(0.3)
        writer.write(ask[10:])
        assert await _answer(reader) == b"hi"
        assert await asyncio.wait_for(reader.read(), 30) == b""  # idle: closed by the proxy
    finally:
        writer.close()
        await writer.wait_closed()
        server.close()
        await server.wait_closed()

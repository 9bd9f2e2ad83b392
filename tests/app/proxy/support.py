"""What the proxy's tests share: a real etcd, real brokers as broker groups, the proxy served by
spoolmq's own HTTP server as ``spoolmq proxy`` serves it, all on 127.0.0.1 — and brokers that
misbehave on cue, as real sockets between the proxy and a broker (or in a broker's place)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx
from fastapi import FastAPI

from app.proxy.context import Proxy, ProxyLimits
from app.proxy.main import create_proxy_app, proxy_server
from app.server import Server, ServerLimits
from services.cluster import BrokerMember, ClusterKeys, EtcdClient
from tests.conftest import LiveServer, start_server, wait_until
from tests.etcd_support import EtcdServer, start_etcd

CLUSTER = "c1"
KEYS = ClusterKeys(CLUSTER)


# ================================================================ the proxy and its cluster


@dataclass
class ProxyServer:
    url: str
    app: FastAPI
    server: Server
    thread: threading.Thread

    @property
    def parts(self) -> Proxy:
        """The running proxy's parts (its route registry, forwarder, budget shares)."""
        proxy: Proxy = self.app.state.proxy
        return proxy

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the proxy did not stop"


def start_proxy(
    etcd_url: str,
    cluster: str = CLUSTER,
    limits: ProxyLimits | None = None,
    server_limits: ServerLimits | None = None,
    grpc_listen: str | None = None,
) -> ProxyServer:
    """A proxy served as ``spoolmq proxy`` serves it, on a free port of 127.0.0.1 (its gRPC
    face too with ``grpc_listen``: ``app.state.grpc.port``)."""
    app = create_proxy_app(cluster, [etcd_url], limits, grpc_listen=grpc_listen)
    server = proxy_server(app, server_limits)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    tls = limits.tls if limits is not None else None
    scheme = "https" if tls is not None and tls.serves else "http"
    url = f"{scheme}://127.0.0.1:{sock.getsockname()[1]}"
    verify = tls.client_context() if tls is not None else True
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    proxy = ProxyServer(url, app, server, thread)
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=5, verify=verify).status_code == 200:
                return proxy
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            proxy.stop()
            raise RuntimeError("the proxy did not start")
        time.sleep(0.02)


def member(name: str, group: str, live: LiveServer, role: str = "master") -> BrokerMember:
    ha = live.broker.replica.ha_address or "127.0.0.1:1"
    return BrokerMember(name, group, live.url, ha, role)


def put_members(etcd_url: str, masters: dict[str, BrokerMember], *others: BrokerMember) -> None:
    """Write what the election would: each group's master key and its broker keys."""

    async def run() -> None:
        client = EtcdClient([etcd_url])
        try:
            for group, master in masters.items():
                await client.put(KEYS.master(group), master.to_json())
                await client.put(KEYS.broker(group, master.name), master.to_json())
            for other in others:
                await client.put(KEYS.broker(other.group, other.name), other.to_json())
        finally:
            await client.aclose()

    asyncio.run(run())


@dataclass
class Cluster:
    etcd: EtcdServer
    a: LiveServer  # group g1
    b: LiveServer  # group g2
    proxy: ProxyServer
    http: httpx.Client


def two_groups(tmp_path: Path, **overrides: Any) -> Iterator[Cluster]:
    """etcd, brokers a (group g1) and b (group g2), and a proxy; all stopped afterwards.
    ``overrides``: settings of both brokers."""
    etcd = start_etcd(tmp_path)
    started: list[LiveServer] = []
    try:
        a = start_server(tmp_path / "a", broker_name="a", **overrides)
        started.append(a)
        b = start_server(tmp_path / "b", broker_name="b", ha_listen="127.0.0.1:0", **overrides)
        started.append(b)
        put_members(etcd.url, {"g1": member("a", "g1", a), "g2": member("b", "g2", b)})
        proxy = start_proxy(etcd.url)
    except BaseException:
        for live in started:
            live.stop()
        etcd.stop()
        raise
    with httpx.Client(base_url=proxy.url, timeout=40) as http:
        yield Cluster(etcd, a, b, proxy, http)
    proxy.stop()
    for live in started:
        if live.thread.is_alive():
            live.stop()
    etcd.stop()


def probe_drained_groups_once(cluster: Cluster) -> None:
    """The proxy probes a drained broker group once, then not again during the test: which
    groups a round of a group pull or a receive asks is then known."""
    cluster.proxy.parts.shares.probe_interval_s = 3600


# ================================================================ requests and answers


def create_topic(http: httpx.Client, topic: str, queues: int = 8) -> dict[str, Any]:
    """A topic spread over both groups: with 8 queues, 0-3 are g1's own 0-3 and 4-7 are g2's
    0-3; with 4, 0-1 are g1's and 2-3 are g2's 0-1."""
    answer = http.put(f"/v1/topics/{topic}", json={"write_queue_nums": queues})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def send(http: httpx.Client, topic: str, body: str, **fields: Any) -> dict[str, Any]:
    answer = http.post(f"/v1/topics/{topic}/messages", json={"body": body, **fields})
    assert answer.status_code == 201, answer.text
    return dict(answer.json()["messages"][0])


def local_queue_counts(live: LiveServer, topic: str) -> dict[int, int]:
    """The broker's own queues of ``topic`` (local ids) and how many messages each holds."""
    answer = httpx.get(f"{live.url}/v1/topics/{topic}", timeout=10)
    if answer.status_code == 404:  # not (yet) on this broker
        return {}
    detail = answer.json()
    return {q["queue_id"]: q["max_offset"] for q in detail["queues"]}


def is_problem(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """``answer`` is a problem+json of ``status`` and ``code`` naming its request's id."""
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = answer.json()
    assert body["code"] == code
    assert body["request_id"] == answer.headers["x-request-id"]
    return body


def exchange(url: str, wire: bytes, until: bytes = b"", timeout_s: float = 20) -> bytes:
    """``wire`` written on a new connection to ``url``; what came back until ``until`` was
    seen, or until the server closed the connection (a timeout fails the test: the server
    never let go)."""
    split = httpx.URL(url)
    assert split.port is not None
    with socket.create_connection((split.host, split.port), timeout=timeout_s) as sock:
        sock.sendall(wire)
        received = b""
        while not (until and until in received) and (chunk := sock.recv(65536)):
            received += chunk
    return received


def statuses(received: bytes) -> list[bytes]:
    """The status codes of the answers in ``received``, in order."""
    return [answer[:3] for answer in received.split(b"HTTP/1.1 ")[1:]]


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


def header_of(message: bytes, name: bytes) -> bytes | None:
    """The value of header ``name`` (lower case) in an HTTP message's head."""
    for line in message.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def problem_answer(status: int, reason: bytes, code: str, request_id: bytes = b"") -> bytes:
    """A broker's problem answer, as its bytes on the wire, naming the request's id."""
    body = b'{"type":"about:blank","status":%d,"code":"%s","request_id":"%s"}' % (
        status,
        code.encode(),
        request_id,
    )
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/problem+json\r\n"
        b"x-request-id: %s\r\ncontent-length: %d\r\n\r\n%s"
        % (status, reason, request_id, len(body), body)
    )


# ================================================================ brokers that misbehave


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
                try:
                    self._read_request(connection)
                except OSError:
                    pass  # the proxy gave up first

    def _read_request(self, connection: socket.socket) -> None:
        connection.settimeout(5)
        request = read_message(connection, bytearray())
        if request is not None:
            self.keys.append((header_of(request, b"idempotency-key") or b"").decode())

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        self.server.close()


QUICK = ProxyLimits(send_timeout_s=1.5, send_attempt_timeout_s=0.5)
"""Send bounds short enough for a test to see a send's outcome stay unknown."""


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


class FaultyHop:
    """Between the proxy and a broker: passes each request to ``broker`` over a connection of
    its own and, per request, does what ``plan`` says next (``pass`` once it is empty):

    * ``pass``: the broker's answer goes back;
    * ``lose``: the broker acts on the request, its answer is lost (the proxy's connection is
      closed);
    * ``500``: the broker acts on it, and the proxy gets a 500 instead of its answer;
    * any other word: the request does not reach the broker, and the proxy gets a problem
      answer of that code (``BROKER_UNAVAILABLE``, ``IDEMPOTENCY_UNAVAILABLE``, ...).

    Every request's Idempotency-Key is noted in ``keys`` (empty when it had none).
    """

    REFUSALS: ClassVar[dict[str, tuple[int, bytes]]] = {
        "BROKER_UNAVAILABLE": (503, b"Service Unavailable"),
        "NO_MASTER": (503, b"Service Unavailable"),
        "IDEMPOTENCY_UNAVAILABLE": (501, b"Not Implemented"),
    }

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
                    self.keys.append((header_of(request, b"idempotency-key") or b"").decode())
                    action = self.plan.pop(0) if self.plan else "pass"
                request_id = header_of(request, b"x-request-id") or b""
                if action in self.REFUSALS:
                    status, reason = self.REFUSALS[action]
                    client.sendall(problem_answer(status, reason, action, request_id))
                    continue
                upstream.sendall(request)
                answer = read_message(upstream, outbound)
                if answer is None or action == "lose":
                    return
                if action == "500":
                    reason = b"Internal Server Error"
                    answer = problem_answer(500, reason, "INTERNAL_ERROR", request_id)
                client.sendall(answer)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        self.server.close()


@contextmanager
def g2_through_a_hop(cluster: Cluster) -> Iterator[FaultyHop]:
    """g2's master (broker b) reached through a :class:`FaultyHop`: etcd gives the hop's
    address for it, and the proxy follows."""
    hop = FaultyHop(cluster.b.url)
    put_members(cluster.etcd.url, {"g2": BrokerMember("b", "g2", hop.url, "127.0.0.1:1")})
    wait_until(lambda: master_url(cluster.proxy, "g2") == hop.url)
    try:
        yield hop
    finally:
        put_members(cluster.etcd.url, {"g2": member("b", "g2", cluster.b)})
        hop.stop()


def master_url(proxy: ProxyServer, group: str) -> str | None:
    """The URL of the master ``proxy`` follows for ``group`` now."""
    master = proxy.parts.registry.view.master_of(group)
    return None if master is None else master.http_url

"""What the server's tests share: a real :class:`~app.server.Server` in a thread on a free
port of 127.0.0.1, a raw-socket client that reads answers off the wire, and small ASGI helpers.

Every wait is bounded (socket timeouts, joins); none is a timing assertion.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from app.server import Server, ServerLimits, WireFace

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

WAIT_S = 10.0
"""The bound on any one wait of a test: reached only when something is broken."""

FAST = ServerLimits(
    header_timeout_s=5.0,
    body_timeout_s=5.0,
    keep_alive_timeout_s=5.0,
    max_header_bytes=8 * 1024,
    graceful_shutdown_s=5.0,
)
"""Limits no test of the ordinary paths runs into; tests of a deadline shorten theirs."""


class ConnectionClosedError(Exception):
    """The server closed the connection where the client expected more bytes."""


@dataclass
class Answer:
    """One answer read off the wire."""

    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    framing: str  # "length", "chunked", "close" or "none"
    raw: bytes  # the status line, headers and body as they came
    chunks: list[bytes] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        values = self.all(name)
        assert len(values) <= 1, f"{name} given {len(values)} times: {self.headers}"
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        return [value for key, value in self.headers if key == name.lower()]


class Client:
    """A raw TCP client of the server: sends bytes as they are, reads answers as they come."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()  # received, not read yet

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_slowly(self, data: bytes, piece: int, pause_s: float = 0.002) -> None:
        """``data`` in writes of ``piece`` bytes, with a pause after each."""
        for start in range(0, len(data), piece):
            self.sock.sendall(data[start : start + piece])
            time.sleep(pause_s)

    def request(
        self,
        method: str = "GET",
        target: str = "/",
        headers: list[tuple[str, str]] | None = None,
        body: bytes = b"",
        version: str = "1.1",
    ) -> None:
        self.send(request_bytes(method, target, headers, body, version))

    def recv(self, size: int = 65536) -> bytes:
        """Bytes as one ``recv`` gives them (the buffer first); b"" at the connection's end."""
        if self.buffer:
            return self._take(len(self.buffer))
        return self.sock.recv(size)

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionClosedError(f"closed; unread: {bytes(self.buffer)!r}")
        self.buffer += data

    def _take(self, size: int) -> bytes:
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data

    def read_until(self, marker: bytes) -> bytes:
        while (at := self.buffer.find(marker)) < 0:
            self._more()
        return self._take(at + len(marker))

    def read_exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            self._more()
        return self._take(size)

    def read_to_close(self) -> bytes:
        """Everything up to the connection's end (ConnectionResetError counts as its end)."""
        while True:
            try:
                more = self.sock.recv(65536)
            except ConnectionResetError:
                break
            if not more:
                break
            self.buffer += more
        return self._take(len(self.buffer))

    def is_closed(self) -> bool:
        """The connection ends with nothing more to read (waits up to the socket timeout)."""
        return self.read_to_close() == b""

    def read_answer(self, head: bool = False) -> Answer:
        """The next answer; ``head``: it answers a HEAD request (headers only)."""
        start = self.read_until(b"\r\n\r\n")
        lines = start[:-4].decode("latin-1").split("\r\n")
        version, status, reason = [*lines[0].split(" ", 2), ""][:3]
        assert version == "HTTP/1.1", lines[0]
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name.lower(), value.strip()))
        answer = Answer(int(status), reason, headers, b"", "none", start)
        codes = dict(headers)
        if head or answer.status in (204, 304) or answer.status < 200:
            return answer
        if codes.get("transfer-encoding", "").lower() == "chunked":
            answer.framing = "chunked"
            raw = b""
            while True:
                size_line = self.read_until(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                data = self.read_exactly(size + 2)
                raw += size_line + data
                assert data.endswith(b"\r\n"), data[-10:]
                if size == 0:
                    break
                answer.chunks.append(data[:-2])
            answer.body = b"".join(answer.chunks)
            answer.raw += raw
        elif "content-length" in codes:
            answer.framing = "length"
            answer.body = self.read_exactly(int(codes["content-length"]))
            answer.raw += answer.body
        else:
            answer.framing = "close"
            answer.body = self.read_to_close()
            answer.raw += answer.body
        return answer


def request_bytes(
    method: str = "GET",
    target: str = "/",
    headers: list[tuple[str, str]] | None = None,
    body: bytes = b"",
    version: str = "1.1",
) -> bytes:
    """A request with a Host header, and a Content-Length where it has a body (unless the
    headers say how the body is framed)."""
    lines = [f"{method} {target} HTTP/{version}", "Host: test"]
    given = [(name, value) for name, value in headers or []]
    names = {name.lower() for name, _ in given}
    if body and not names & {"content-length", "transfer-encoding"}:
        given.append(("Content-Length", str(len(body))))
    lines += [f"{name}: {value}" for name, value in given]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def chunked(*pieces: bytes) -> bytes:
    """``pieces`` as a chunked body, with its last chunk."""
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces if p) + b"0\r\n\r\n"


@dataclass
class Running:
    """A server serving in a thread of its own."""

    server: Server
    thread: threading.Thread
    sockets: list[socket.socket]
    clients: list[Client] = field(default_factory=list)
    ports: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.ports = [sock.getsockname()[1] for sock in self.sockets]

    @property
    def port(self) -> int:
        return self.ports[0]

    def connect(self, port: int | None = None, receive_buffer: int | None = None) -> Client:
        """A client; ``receive_buffer``: the socket's, small and fixed (no autotuning)."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.settimeout(WAIT_S)
        if receive_buffer is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        try:
            sock.connect(("127.0.0.1", port or self.port))
        except OSError:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        client = Client(sock)
        self.clients.append(client)
        return client

    def stop(self, timeout: float = 30.0) -> None:
        """Set ``should_exit`` (from this thread, not the server's) and wait for the end."""
        self.server.should_exit = True
        self.ended(timeout)

    def ended(self, timeout: float = WAIT_S) -> None:
        """Wait for the server's thread to end; then its sockets are closed (a server that
        served closed them itself)."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the server did not stop"
        for sock in self.sockets:
            sock.close()

    def close_clients(self) -> None:
        for client in self.clients:
            client.close()


def start(
    app: Any,
    limits: ServerLimits = FAST,
    on_shutdown: Callable[[], None] | None = None,
    sockets: int = 1,
    face: WireFace | None = None,
) -> Running:
    """Serve ``app`` on a socket bound to a free port of 127.0.0.1 (``sockets`` of them), once
    it serves; if it never does (its start-up failed), the thread has ended."""
    socks = []
    for _ in range(sockets):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        socks.append(sock)
    server = Server(app, limits, on_shutdown=on_shutdown, face=face)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": socks}, name="test-server", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + WAIT_S
    while not server.started and thread.is_alive():
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.005)
    return Running(server, thread, socks)


@contextmanager
def serving(
    app: Any,
    limits: ServerLimits = FAST,
    on_shutdown: Callable[[], None] | None = None,
    face: WireFace | None = None,
) -> Iterator[Running]:
    """A running server for the ``with`` block; stopped (and its clients closed) after it."""
    running = start(app, limits, on_shutdown, face=face)
    assert running.server.started, "the server did not start"
    try:
        yield running
    finally:
        running.close_clients()
        running.stop()


def http_app(handler: AsgiApp) -> AsgiApp:
    """An ASGI app of ``handler`` for http scopes; it has no lifespan (returns at once)."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await handler(scope, receive, send)

    return app


async def read_body(receive: Receive) -> bytes:
    """The whole request body."""
    body = b""
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        body += bytes(message.get("body", b""))
        if not message.get("more_body", False):
            return body


async def answer(
    send: Send,
    status: int = 200,
    body: bytes = b"",
    headers: list[tuple[bytes, bytes]] | None = None,
    length: bool = True,
) -> None:
    """One whole answer; ``length``: with a Content-Length header."""
    given = list(headers or [])
    if length:
        given.append((b"content-length", b"%d" % len(body)))
    await send({"type": "http.response.start", "status": status, "headers": given})
    await send({"type": "http.response.body", "body": body})


async def until(event: threading.Event, within_s: float = WAIT_S) -> None:
    """Wait on the server's loop for an event set by the test's thread."""
    deadline = asyncio.get_running_loop().time() + within_s
    while not event.is_set():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("the test never set the event")
        await asyncio.sleep(0.005)


def next_item(items: queue.Queue[Any], timeout: float = WAIT_S) -> Any:
    """The next thing an app put in ``items`` (fails the test when none comes)."""
    try:
        return items.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError("the app put nothing in time") from None

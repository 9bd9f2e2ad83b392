"""An HTTP relay in front of one broker: the least that a Python proxy which reads HTTP costs.

``byte_relay.py`` copies bytes and parses nothing; ``spoolmq proxy`` parses, routes, keys,
merges answers and handles every failure. This relay sits between them: it parses each
request and each answer with httptools (the parser of the proxy and of spoolmq's server),
writes a new request head for the broker (the client's Content-Type and the body's length,
and for a send a new Idempotency-Key, as the proxy gives every send) and a new answer head
for the client, each in one write, from protocol callbacks alone: no task, no request or
response object, no routing, no retry. What it adds over the byte relay is the floor of HTTP
parsing in Python; what the proxy adds over it is everything else the proxy does.

Not a proxy: no error handling beyond closing both connections, no pipelining, no flow
control, bodies with a Content-Length only.

    uv run python bench/http_relay.py --port 9000 --upstream 127.0.0.1:8080
"""

from __future__ import annotations

import asyncio
import itertools

import httptools
from byte_relay import Upstream, no_delay, run

_KEYS = itertools.count(1)
_FORWARDED = (b"content-type",)


class _Upstream(asyncio.Protocol):
    """The connection to the broker: one answer at a time, passed to the client's side."""

    def __init__(self, client: _Client) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        no_delay(transport)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.client.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body = b"".join(self.body)
        head = [b"HTTP/1.1 %d -\r\n" % self.parser.get_status_code()]
        for name, value in self.headers:
            if name == b"content-type" or name == b"x-request-id":
                head += (name, b": ", value, b"\r\n")
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        self.headers, self.body = [], []
        self.client.answer(b"".join(head), body)


class _Client(asyncio.Protocol):
    """A client's connection: each request parsed, passed on with a new head, answered."""

    def __init__(self, upstream: Upstream) -> None:
        self.loop = asyncio.get_running_loop()
        self.address = upstream
        self.transport: asyncio.Transport | None = None
        self.upstream: _Upstream | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.waiting: tuple[bytes, bytes] | None = None  # a request before the broker's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        no_delay(transport)
        self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        upstream = _Upstream(self)
        try:
            await self.loop.create_connection(lambda: upstream, *self.address)
        except OSError:
            self.close()
            return
        self.upstream = upstream
        if self.waiting is not None and upstream.transport is not None:
            upstream.transport.writelines(self.waiting)
            self.waiting = None

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        body = b"".join(self.body)
        head = [method, b" ", self.url, b" HTTP/1.1\r\nhost: broker\r\n"]
        for name, value in self.headers:
            if name in _FORWARDED:
                head += (name, b": ", value, b"\r\n")
        if method == b"POST" and self.url.endswith(b"/messages"):  # a send
            head.append(b"idempotency-key: http-relay-%d\r\n" % next(_KEYS))
        head.append(b"content-length: %d\r\n\r\n" % len(body))
        self.url, self.headers, self.body = b"", [], []
        upstream = self.upstream
        if upstream is None or upstream.transport is None:
            self.waiting = (b"".join(head), body)
            return
        upstream.transport.writelines((b"".join(head), body))

    def answer(self, head: bytes, body: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.writelines((head, body))

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


if __name__ == "__main__":
    run(__doc__.splitlines()[0], _Client)

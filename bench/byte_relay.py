"""A byte relay in front of one broker: the least that one more process on the path costs.

It accepts connections and copies bytes both ways between each client and its own connection
to the upstream broker, without parsing anything: the same event loop (uvloop), the same
asyncio protocols and ``TCP_NODELAY`` as ``spoolmq proxy``, and nothing else. A request through
it pays what any hop pays on this machine — two more socket transfers each way and the wakeups
of one more process — and none of the proxy's work (HTTP parsing, routing, keys, merging answers).
``proxy_bench.py`` measures it next to the proxy, so the latency a hop adds is shown against
the floor of any hop.

Flow control both ways: when one side's writes back up, reading from the other pauses.

    uv run python bench/byte_relay.py --port 9000 --upstream 127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from collections.abc import Callable

import uvloop

Upstream = tuple[str, int]
"""A broker's host and port."""


def no_delay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Side(asyncio.Protocol):
    """One end of a relayed connection; what it reads goes to ``peer``."""

    def __init__(self) -> None:
        # The loop kept, not asked for per read: on Python 3.11 `get_running_loop()` makes a
        # getpid system call, which the proxy does not pay per request either.
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.pending: list[bytes] = []  # read before the peer was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        no_delay(transport)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self.pending.append(data)
            return
        if not self.pending:  # what else is read in this turn of the loop goes in one write
            self.loop.call_soon(self._flush)
        self.pending.append(data)

    def _flush(self) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None and not peer.transport.is_closing():
            peer.transport.writelines(self.pending)
        self.pending = []

    def pause_writing(self) -> None:  # our writes back up: stop reading the peer
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


class _Client(_Side):
    """A client's connection: connects its own upstream connection, then relays."""

    def __init__(self, upstream: Upstream) -> None:
        super().__init__()
        self.upstream = upstream

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.loop.create_task(self._connect())

    async def _connect(self) -> None:
        upstream = _Side()
        upstream.peer = self
        try:
            await self.loop.create_connection(lambda: upstream, *self.upstream)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        self.peer = upstream
        assert upstream.transport is not None
        upstream.transport.writelines(self.pending)
        self.pending = []


async def serve(port: int, client: Callable[[], asyncio.Protocol]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(client, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def run(description: str, client: Callable[[Upstream], asyncio.Protocol]) -> None:
    """Parse ``--port`` and ``--upstream``, and serve ``client(upstream)`` per connection."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the broker")
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    upstream = (host, int(port))
    uvloop.run(serve(args.port, lambda: client(upstream)))


if __name__ == "__main__":
    run(__doc__.splitlines()[0], _Client)

"""Serving an ASGI app on listening sockets, and stopping gracefully.

:meth:`Server.run` starts the app's lifespan, serves until SIGINT or SIGTERM (or until
``should_exit`` is set, from any thread), then stops: no new connections, ``on_shutdown``
(the broker answers its parked long-polls at once), idle connections closed, requests in
progress given ``graceful_shutdown_s`` to finish (then cancelled), the app's lifespan shut
down. A signal ends the process with status 0 once that is done.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from email.utils import formatdate
from ssl import SSLContext
from typing import Any, Final

from app.server.connection import HttpConnection
from app.server.exchange import App, WireFace
from app.server.lifespan import Lifespan, LifespanError
from app.server.limits import ServerLimits

log = logging.getLogger("spoolmq.server")

HANDLED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
_TICK_S: Final = 0.1


@dataclass
class ServerState:
    """What every connection of one server shares."""

    limits: ServerLimits
    connections: set[HttpConnection] = field(default_factory=set)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    default_head: bytes = b""
    """The lines every answer's head holds: the ``date`` and :attr:`fixed_headers`."""
    fixed_headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    """Headers every answer carries after the ``date`` (the server's :attr:`Server` headers)."""
    face: WireFace | None = None
    """Takes the requests it serves below ASGI (:class:`~app.server.exchange.WireFace`)."""
    app_state: dict[str, Any] = field(default_factory=dict)
    """The lifespan scope's ``state``: what the app's start-up put there is copied into
    each request's scope (ASGI lifespan state)."""

    def update_date(self) -> None:
        """The ``date`` header every answer carries, made once a second."""
        date = (b"date", formatdate(time.time(), usegmt=True).encode())
        headers = [date, *self.fixed_headers]
        self.default_head = b"".join(b"%s: %s\r\n" % header for header in headers)


class Server:
    """One ASGI app served over HTTP/1.1 on the sockets given to :meth:`run` — the requests
    ``face`` takes, if one is given, by the face below ASGI; every answer carries ``headers``
    (which worker of several answered, say)."""

    def __init__(
        self,
        app: App,
        limits: ServerLimits | None = None,
        on_shutdown: Callable[[], None] | None = None,
        face: WireFace | None = None,
        headers: Sequence[tuple[bytes, bytes]] = (),
        ssl: SSLContext | None = None,
    ) -> None:
        self.app = app
        self.ssl = ssl  # HTTPS: every connection's TLS handshake first (asyncio's ``ssl=``)
        self.limits = limits or ServerLimits()
        self.on_shutdown = on_shutdown
        self.should_exit = False
        self.started = False
        self.state = ServerState(self.limits, face=face, fixed_headers=list(headers))
        self._wake: asyncio.Event | None = None

    def run(self, sockets: Sequence[socket.socket]) -> None:
        """Serve until stopped, on uvloop's event loop (asyncio's where uvloop is missing)."""
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(self.serve(sockets))

    async def serve(self, sockets: Sequence[socket.socket]) -> None:
        loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        handled = self._handle_signals(loop)
        lifespan = Lifespan(self.app, self.state.app_state)
        try:
            try:
                await lifespan.startup()
            except LifespanError as exc:
                log.error("the app did not start: %s", exc)
                return
            self.state.update_date()
            servers = [
                await loop.create_server(self._connection, sock=sock, backlog=2048, ssl=self.ssl)
                for sock in sockets
            ]
            self.started = True
            await self._until_exit()
            await self._stop(servers)
            try:
                await lifespan.shutdown()
            except LifespanError as exc:
                log.error("the app's shut-down failed: %s", exc)
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    def _connection(self) -> HttpConnection:
        return HttpConnection(self.app, self.state)

    def _handle_signals(self, loop: asyncio.AbstractEventLoop) -> list[signal.Signals]:
        if threading.current_thread() is not threading.main_thread():
            return []  # only the main thread gets signals: stopped through should_exit
        for sig in HANDLED_SIGNALS:
            loop.add_signal_handler(sig, self.handle_exit)
        return list(HANDLED_SIGNALS)

    def handle_exit(self) -> None:
        """Stop (a signal, or a caller on the loop's thread)."""
        self.should_exit = True
        if self._wake is not None:
            self._wake.set()

    async def _until_exit(self) -> None:
        wake = self._wake
        assert wake is not None
        ticks = 0
        while not self.should_exit:
            try:
                await asyncio.wait_for(wake.wait(), _TICK_S)
            except TimeoutError:
                pass
            ticks += 1
            if ticks % 10 == 0:
                self.state.update_date()

    async def _stop(self, servers: list[asyncio.Server]) -> None:
        for server in servers:
            server.close()
        if self.on_shutdown is not None:
            self.on_shutdown()
        for connection in list(self.state.connections):
            connection.shutdown()
        tasks = self.state.tasks
        if tasks:
            _, pending = await asyncio.wait(set(tasks), timeout=self.limits.graceful_shutdown_s)
            for task in pending:
                task.cancel()
            if pending:
                log.warning("cancelled %d requests still in progress at shutdown", len(pending))
                await asyncio.wait(pending)
        for connection in list(self.state.connections):
            connection.close()
        for server in servers:
            await server.wait_closed()


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on the platforms it has
        return asyncio.new_event_loop
    return uvloop.new_event_loop


class ListenError(Exception):
    """The server's address cannot be listened on (a busy port, an address not on this host)."""


class ReusePortError(ListenError):
    """The system cannot share a port between sockets (no ``SO_REUSEPORT``)."""


def _reuse_port(sock: socket.socket) -> None:
    option = getattr(socket, "SO_REUSEPORT", None)
    try:
        if option is None:
            raise OSError(errno.ENOPROTOOPT, "no SO_REUSEPORT on this system")
        sock.setsockopt(socket.SOL_SOCKET, option, 1)
    except OSError as exc:
        sock.close()
        raise ReusePortError(f"cannot share a port: {exc.strerror or exc}") from None


def listen_socket(
    host: str, port: int, how: str = "--port or SPOOLMQ_PORT", reuse_port: bool = False
) -> socket.socket:
    """A socket bound to ``host``:``port``, before anything else starts.

    ListenError, one line saying what to do, when the port is taken or the address is not
    this machine's; ``how`` says how another port is chosen. ``reuse_port``: bound with
    ``SO_REUSEPORT``, so that several processes, each with a socket of its own bound so, share
    the port (Linux spreads new connections over those listening); ReusePortError where the
    system has no such option.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            _reuse_port(sock)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ListenError(
                f"cannot listen on {host}:{port}: the port is in use (another server? "
                f"choose another with {how})"
            ) from None
        raise ListenError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock

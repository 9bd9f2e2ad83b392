"""The uvicorn server spoolmq runs on: one worker, uvloop + httptools, graceful shutdown.

On SIGTERM or SIGINT the server stops accepting connections, answers every parked long-poll
at once (instead of waiting out up to 30 s of wait_ms), lets requests in flight finish, then
runs the app's lifespan shutdown: persist offsets and configs, close the store.

Slow or stalled clients cannot hold a connection: a request's line and headers must arrive
within ``header_read_timeout_s`` and fit in ``max_header_bytes`` (408 / 431, connection
closed), a body may not pause for longer than ``body_read_timeout_s`` (408, closed), and an
idle keep-alive connection is closed after ``keep_alive_timeout_s``. uvicorn's httptools
protocol has no such limits of its own: :class:`GuardedHttpToolsProtocol` adds them, with
one timer per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
import threading
from collections.abc import Callable, Generator
from enum import Enum
from typing import Any, Final, cast

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.middleware import BODY_STALLED
from app.security import check_bind
from app.settings import Settings

HANDLED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class _Phase(Enum):
    """Where the connection is in receiving the current request."""

    HEADERS = "headers"  # the request line and headers are coming
    BODY = "body"  # the headers are complete, the body is coming
    IDLE = "idle"  # the request is complete (a response may be on its way)


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """httptools with deadlines for receiving a request and a size cap for its headers.

    One deadline per request, set when it begins (or when the connection opens) and cleared
    once the request is complete, kept by one timer per connection (armed when a deadline is
    set and none is pending; when it fires it acts on the deadline then in force, waits on for a
    later one, or stops when there is none), not one armed and cancelled per request:

    * headers: they must be complete within ``header_timeout_s`` — else 408 and close;
    * body: it may pause for at most ``body_timeout_s`` at a time — else the request's scope
      gets :data:`~app.middleware.BODY_STALLED` and its pending body read is woken, which
      :class:`~app.middleware.HttpShellMiddleware` answers with 408 and a close. (A pause
      while the server itself stopped reading, for backpressure, does not count.)

    The header size counts the request line and headers as they are parsed, and every chunk
    received while they are incomplete (one huge header arriving slowly is refused before
    it ends; a chunk that also finishes the previous request is not counted, so a pipelined
    body never counts as a header): beyond ``max_header_bytes``, 431 and close.
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_header_bytes: int = 64 * 1024

    _timer: asyncio.TimerHandle | None = None
    _deadline_at: float | None = None  # when the current request's deadline falls, if any
    _phase: _Phase = _Phase.HEADERS
    _last_data: float = 0.0
    _received_bytes: int = 0  # chunks received while the headers are incomplete
    _parsed_bytes: int = 0  # request line and headers parsed so far
    _finished_request: bool = False
    _too_large: bool = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._deadline_at = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._too_large:
            return  # refused: the rest is not read
        self._last_data = self.loop.time()
        self._finished_request = False
        super().data_received(data)
        if self._too_large:
            self._refuse(431, b"Request Header Fields Too Large")
            return
        if self._phase is not _Phase.HEADERS or self._finished_request:
            return
        self._received_bytes += len(data)
        if self._received_bytes > self.max_header_bytes and not self.transport.is_closing():
            self._refuse(431, b"Request Header Fields Too Large")

    # ---------------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase is not _Phase.HEADERS:
            self._expect_headers()

    def on_url(self, url: bytes) -> None:
        self.url += url  # uvicorn's, with the count in the same frame (see on_header)
        self._count(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        # uvicorn's own, with the count in the same frame: this runs for every header of
        # every request, and a call to the parent and one to ``_count`` doubled its cost.
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))
        self._parsed_bytes += len(name) + len(value) + 4
        if self._parsed_bytes > self.max_header_bytes:
            self._too_large = True

    def on_headers_complete(self) -> None:
        self._phase = _Phase.BODY  # the timer runs on, now for the body
        if not self._too_large:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._too_large:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._too_large:
            return
        super().on_message_complete()
        self._phase = _Phase.IDLE
        self._finished_request = True
        self._deadline_at = None  # _stop_timer(), in this frame: once per request

    # ---------------------------------------------------------------- deadlines and limits

    def _count(self, size: int) -> None:
        self._parsed_bytes += size
        if self._parsed_bytes > self.max_header_bytes:
            self._too_large = True

    def _expect_headers(self) -> None:
        self._phase = _Phase.HEADERS
        self._received_bytes = self._parsed_bytes = 0
        self._set_deadline(self.loop.time() + self.header_timeout_s)

    def _set_deadline(self, when: float) -> None:
        self._deadline_at = when
        timer = self._timer
        if timer is None or timer.when() > when:
            if timer is not None:
                timer.cancel()
            self._timer = self.loop.call_at(when, self._deadline)

    def _stop_timer(self) -> None:
        self._deadline_at = None  # the timer, if pending, finds no deadline and stops

    def _deadline(self) -> None:
        self._timer = None
        when = self._deadline_at
        if when is None or self.transport.is_closing():
            return
        if self.loop.time() < when:  # a later request's deadline: wait on for it
            self._timer = self.loop.call_at(when, self._deadline)
            return
        self._deadline_at = None
        if self._phase is _Phase.HEADERS:
            self._refuse(408, b"Request Timeout")
        elif self._phase is _Phase.BODY:
            paused = self.loop.time() - self._last_data
            if paused < self.body_timeout_s or self.flow.read_paused:
                wait = self.body_timeout_s - paused if paused < self.body_timeout_s else 1.0
                self._set_deadline(self.loop.time() + wait)
            else:
                self._body_stalled()

    def _body_stalled(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_started:
            self.transport.close()  # nobody can be told: just let go of the connection
            return
        cast(dict[str, Any], cycle.scope)[BODY_STALLED] = True
        cycle.message_event.set()  # wakes the body read, which fails with 408

    def _refuse(self, status: int, reason: bytes) -> None:
        """Answer (unless a response is being sent) and close the connection."""
        self._stop_timer()
        if self.cycle is None or self.cycle.response_complete:
            body = reason + b"\n"
            self.transport.write(
                b"HTTP/1.1 %d %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                % (status, reason, len(body), body)
            )
        self.transport.close()


def guarded_protocol(settings: Settings) -> type[GuardedHttpToolsProtocol]:
    """The protocol class with the settings' deadlines and header size cap."""

    class SpoolHttpProtocol(GuardedHttpToolsProtocol):
        header_timeout_s = settings.header_read_timeout_s
        body_timeout_s = settings.body_read_timeout_s
        max_header_bytes = settings.max_header_bytes

    return SpoolHttpProtocol


class SpoolServer(uvicorn.Server):
    """uvicorn.Server that wakes long-polls first on shutdown and exits 0 after a signal."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises the signal after a graceful shutdown, which would end the
        # process with -15 or a KeyboardInterrupt; a clean shutdown exits 0 instead.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


class ListenError(Exception):
    """The server's address cannot be listened on (a busy port, an address not on this host)."""


def listen_socket(host: str, port: int, how: str = "--port or SPOOLMQ_PORT") -> socket.socket:
    """A socket bound to ``host``:``port``, before anything else starts (as uvicorn binds it).

    ListenError, one line saying what to do, when the port is taken or the address is not
    this machine's (uvicorn would print ``[Errno 98]`` between its startup lines); ``how``
    says how another port is chosen.
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


def build_server(app: FastAPI, settings: Settings) -> SpoolServer:
    """A server for ``app`` on the settings' host and port.

    Raises UnsafeBindError for a non-loopback host without an auth file or --allow-anonymous.
    """
    check_bind(
        settings.host,
        auth_enabled=settings.auth_file is not None,
        allow_anonymous=settings.allow_anonymous,
    )
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http=guarded_protocol(settings),
        ws="none",
        lifespan="on",
        log_level=settings.log_level,
        access_log=settings.access_log,
        timeout_graceful_shutdown=max(1, round(settings.graceful_shutdown_s)),
        timeout_keep_alive=settings.keep_alive_timeout_s,
        server_header=False,
        proxy_headers=False,
    )
    return SpoolServer(config, on_shutdown=app.state.broker.begin_shutdown)

"""Keep-alive HTTP/1.1 connections from the proxy to its brokers: asyncio protocols with
httptools' response parser (the parser spoolmq's server uses for requests).

Why not a general-purpose client: the proxy makes one kind of request to servers it knows —
small heads, bodies already in memory, answers with a Content-Length — thousands of times a
second. httpx (httpcore) spent most of a proxied send in its pool's bookkeeping (every pooled
connection polled for readability on every request, a failed ``import sniffio`` per request);
aiohttp is faster but a dozen packages. A connection here is a protocol object with one parser,
one future per exchange and one write per request (head and body together, TCP_NODELAY), taken
from a per-broker stack of idle connections.

A broker whose URL is https (:meth:`Upstream.use_tls`) is reached over TLS, its certificate
checked against the proxy's ``--tls-ca`` (the system's CAs without one).

Errors say how far a request got, which decides whether it may be sent elsewhere:

    UpstreamError
     ├── NotSentError           nothing left the proxy: refused, connect timeout, no connection
     └── OutcomeUnknownError    written (or maybe written): no complete answer came
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, cast

import httptools

from services import TlsConfig

Origin = tuple[str, int]
Body = bytes | tuple[bytes | memoryview, ...]
"""A request body: one bytes, or buffers written one after the other (no join, no copy)."""

IDLE_S: Final = 2.0
"""A connection idle longer is closed rather than reused: brokers close theirs after 5 s, and a
request written just as the broker closes would have an unknown outcome."""


class UpstreamError(Exception):
    """A broker did not give a complete answer."""

    def __init__(self, origin: Origin, reason: str) -> None:
        super().__init__(f"{origin[0]}:{origin[1]}: {reason}")
        self.origin = origin
        self.reason = reason


class NotSentError(UpstreamError):
    """The request never left the proxy: it may safely go to another broker."""


class OutcomeUnknownError(UpstreamError):
    """The request was written, or may have been: the broker may have acted on it."""


@dataclass(slots=True)
class UpstreamAnswer:
    """A broker's complete answer: status, headers (names lower-cased) and body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


class Connection(asyncio.Protocol):
    """One keep-alive connection: at most one exchange at a time."""

    def __init__(self, origin: Origin, loop: asyncio.AbstractEventLoop) -> None:
        self.origin = origin
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[UpstreamAnswer] | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.closed = False
        self.reusable = True
        self.idle_since = 0.0
        # One timer for the connection's whole life, not one per exchange: an exchange sets its
        # deadline, and the timer, when it fires, times out the exchange that is past its own
        # or waits on for the one in progress (none in progress: it stops until the next).
        self.deadline = 0.0
        self.timeout_s = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # nothing asked: a broker does not speak first
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(f"unparsable answer: {exc}")
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(f"connection closed: {exc or 'by the broker'}")

    # ---------------------------------------------------------------- parser callbacks

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        answer = UpstreamAnswer(self.parser.get_status_code(), self.headers, b"".join(self.body))
        self.reusable = self.parser.should_keep_alive()
        self.headers, self.body = [], []
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    # ---------------------------------------------------------------- exchange

    async def exchange(
        self, data: Iterable[bytes | memoryview], timeout_s: float
    ) -> UpstreamAnswer:
        """Write one request, wait for its answer; OutcomeUnknownError on anything else."""
        waiter: asyncio.Future[UpstreamAnswer] = self.loop.create_future()
        if not self.start(data, timeout_s, waiter):
            raise OutcomeUnknownError(self.origin, "connection closed before the write")
        try:
            return await waiter
        finally:
            if not waiter.done() or waiter.cancelled():  # the caller gave up: answer unread
                self.close()

    def start(
        self,
        data: Iterable[bytes | memoryview],
        timeout_s: float,
        waiter: asyncio.Future[UpstreamAnswer],
    ) -> bool:
        """Write one request; ``waiter`` gets its answer, or OutcomeUnknownError. False, with
        nothing written, when the connection is closed."""
        assert self.transport is not None
        if self.closed or self.transport.is_closing():
            return False
        self.waiter = waiter
        self.transport.writelines(data)
        self.deadline = self.loop.time() + timeout_s
        self.timeout_s = timeout_s
        timer = self.timer
        if timer is None or timer.when() > self.deadline:
            # armed for a longer exchange before (a long-poll): it would fire too late
            if timer is not None:
                timer.cancel()
            self.timer = self.loop.call_at(self.deadline, self._check_deadline)
        return True

    def _check_deadline(self) -> None:
        """The connection's timer: the exchange in progress times out at its deadline."""
        self.timer = None
        waiter = self.waiter
        if waiter is None or waiter.done() or self.closed:
            return  # nothing in progress: the next exchange arms the timer again
        if self.loop.time() < self.deadline:
            self.timer = self.loop.call_at(self.deadline, self._check_deadline)
            return
        waiter.set_exception(
            OutcomeUnknownError(self.origin, f"no answer within {self.timeout_s:g} s")
        )
        self.close()

    def _fail(self, reason: str) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(OutcomeUnknownError(self.origin, reason))

    def close(self) -> None:
        self.closed = True
        self.reusable = False
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.transport is not None:
            self.transport.close()


class _Slots:
    """How many more requests may go to one broker at once, and who waits for a turn, first
    come first served: asyncio.Semaphore's behaviour for what the proxy needs of it, at the cost
    of a comparison and a subtraction when a slot is free (the semaphore's acquire and release
    cost a proxied request more than its routing)."""

    __slots__ = ("free", "waiters")

    def __init__(self, free: int) -> None:
        self.free = free
        self.waiters: deque[asyncio.Future[None]] = deque()

    def take_now(self) -> bool:
        """A slot if one is free and nobody waits for one."""
        if self.free > 0 and not self.waiters:
            self.free -= 1
            return True
        return False

    async def wait(self, timeout_s: float) -> bool:
        """A slot after those who wait for one (True), or False when none came free within
        ``timeout_s``."""
        loop = asyncio.get_running_loop()
        turn: asyncio.Future[None] = loop.create_future()
        self.waiters.append(turn)
        timer = loop.call_later(timeout_s, _expire, turn)
        try:
            await turn
        except TimeoutError:
            self._leave(turn)
            return False
        except BaseException:  # cancelled: a slot handed over meanwhile goes to the next
            self._leave(turn)
            if turn.done() and not turn.cancelled() and turn.exception() is None:
                self.give_back()
            raise
        finally:
            timer.cancel()
        return True

    def give_back(self) -> None:
        """A slot is free: handed to the first who still waits, else counted."""
        while self.waiters:
            turn = self.waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.free += 1

    def _leave(self, turn: asyncio.Future[None]) -> None:
        try:
            self.waiters.remove(turn)
        except ValueError:
            pass  # handed its slot and taken off already


def _expire(turn: asyncio.Future[None]) -> None:
    if not turn.done():
        turn.set_exception(TimeoutError())


class Upstream:
    """Keep-alive connections to every broker, reused most-recent first."""

    def __init__(
        self,
        connect_timeout_s: float = 2.0,
        max_per_origin: int = 1024,
        tls: TlsConfig | None = None,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.max_per_origin = max_per_origin
        self.tls = tls
        self._idle: dict[Origin, list[Connection]] = {}
        self._slots: dict[Origin, _Slots] = {}
        self._tls_origins: set[Origin] = set()
        self._tls_context: ssl.SSLContext | None = None

    def use_tls(self, host: str, port: int) -> None:
        """Reach the broker at ``host``:``port`` over TLS (its URL is https)."""
        self._tls_origins.add((host, port))

    def _context_for(self, origin: Origin) -> ssl.SSLContext | None:
        if origin not in self._tls_origins:
            return None
        if self._tls_context is None:
            tls = self.tls
            self._tls_context = (
                tls.client_context() if tls is not None else ssl.create_default_context()
            )
        return self._tls_context

    async def request(
        self,
        origin: Origin,
        head: bytes,
        body: Body,
        timeout_s: float,
    ) -> UpstreamAnswer:
        """Send ``head`` (request line and headers, CRLF-terminated) and ``body``."""
        data = (head, *body) if isinstance(body, tuple) else (head, body) if body else (head,)
        slots = self._slots.get(origin)
        if slots is None:
            slots = self._slots[origin] = _Slots(self.max_per_origin)
        if not slots.take_now() and not await slots.wait(self.connect_timeout_s):
            raise NotSentError(origin, "no free connection in time")
        try:
            connection = self._take(origin) or await self._connect(origin)
            answer = await connection.exchange(data, timeout_s)
            self._give_back(connection)
            return answer
        finally:
            slots.give_back()

    def _take(self, origin: Origin) -> Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        oldest_kept = time.monotonic() - IDLE_S
        while idle:
            connection = idle.pop()
            if not connection.closed and connection.idle_since >= oldest_kept:
                return connection
            connection.close()
        return None

    def _give_back(self, connection: Connection) -> None:
        if connection.closed or not connection.reusable:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        self._idle.setdefault(connection.origin, []).append(connection)

    async def _connect(self, origin: Origin) -> Connection:
        loop = asyncio.get_running_loop()
        context = self._context_for(origin)
        try:
            _, connection = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Connection(origin, loop),
                    *origin,
                    ssl=context,
                    server_hostname=origin[0] if context else None,
                ),
                self.connect_timeout_s,
            )
        except TimeoutError:
            raise NotSentError(origin, "connect timed out") from None
        except OSError as exc:
            raise NotSentError(origin, f"connect failed: {exc.strerror or exc}") from None
        return connection

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.close()
        self._idle.clear()

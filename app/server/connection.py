"""One client connection of the HTTP/1.1 server: httptools parses the requests, an ASGI app
answers each in turn (:class:`~app.server.exchange.Exchange`) — or the server's wire face, for
the requests it takes.

Why not uvicorn: the server must hold slow clients to deadlines (a request's headers within
``header_timeout_s``, a body that never pauses for ``body_timeout_s``) and cap a request's
headers — uvicorn's httptools protocol has none of these, and offers no public way to add
them — and a small answer should leave in one write. This protocol is built on the two
documented interfaces below ASGI: :class:`asyncio.Protocol` and httptools'
``HttpRequestParser`` callbacks.

Pipelined requests are answered in order, one at a time: while one is answered the next
waits with its body (reading pauses). One timer per connection keeps the deadline of the
moment — the headers', a stalled body's, or the keep-alive's — and is armed again only when
an earlier deadline is set, not once per request.
"""

from __future__ import annotations

import asyncio
import socket
from collections import deque
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

import httptools

from app.server.exchange import App, Exchange
from app.server.limits import BODY_STALLED, ServerLimits

if TYPE_CHECKING:
    from app.server.serve import ServerState

HIGH_WATER: Final = 256 * 1024
"""Request body bytes held for the app before the connection stops reading: above what one
read brings, so that a body that came whole with its headers (the app not yet running) does
not stop and start the reading — two more system calls for each such request."""
_ASGI: Final = {"version": "3.0", "spec_version": "2.3"}


class Phase(Enum):
    """What the connection waits for from its client."""

    HEADERS = "headers"  # a request's line and headers: 408 past the deadline
    BODY = "body"  # the rest of a request's body: 408 once it stalls
    ANSWERING = "answering"  # nothing: the request is complete, its answer on the way
    KEEP_ALIVE = "keep-alive"  # the next request: the connection closes past the deadline


class HttpConnection(asyncio.Protocol):
    """Requests of one client, parsed and answered in order."""

    def __init__(self, app: App, state: ServerState) -> None:
        self.app = app
        self.state = state
        self.limits: ServerLimits = state.limits
        self.loop = asyncio.get_running_loop()
        self.parser = httptools.HttpRequestParser(self)
        # What follows a request that closes the connection is not read as another request
        # (that request is answered, then the connection closes).
        self.parser.set_dangerous_leniencies(lenient_data_after_close=True)
        self.transport: asyncio.Transport | None = None
        self.client: tuple[str, int] | None = None
        self.server: tuple[str, int] | None = None
        self.scheme = "http"  # "https" on a server with a certificate
        # the request being parsed
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.expect_continue = False
        self.header_bytes = 0  # its request line and headers parsed so far
        self.received_bytes = 0  # bytes received while its headers are incomplete
        self.parsing: Exchange | None = None  # its exchange, once its headers are complete
        self.completed = 0  # requests parsed whole
        self.refused = False  # answered 400/408/431: the rest is not read
        self.pending_refusal: bytes | None = None  # written after the answer in progress
        # the requests being answered
        self.current: Exchange | None = None
        self.waiting: deque[Exchange] = deque()
        # flow control
        self.read_paused = False
        self.write_paused = False
        self.drained: list[asyncio.Future[None]] = []
        # the one timer
        self.phase = Phase.HEADERS
        self.deadline: float | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.last_data = 0.0

    # ---------------------------------------------------------------- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream transport
        self.state.connections.add(self)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client = _address(transport.get_extra_info("peername"))
        self.server = _address(transport.get_extra_info("sockname"))
        if transport.get_extra_info("sslcontext") is not None:
            self.scheme = "https"
        self._expect(Phase.HEADERS, self.limits.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self.state.connections.discard(self)
        self.deadline = None
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        for exchange in (self.current, *self.waiting):
            if exchange is not None:
                exchange.lost()
        self.waiting.clear()
        self._resume_writers()

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        self.last_data = self.loop.time()
        completed = self.completed
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # No protocol upgrades: the request is answered as it is, then the connection
            # closes (what follows its headers is not HTTP).
            for exchange in (self.current, *self.waiting):
                if exchange is not None:
                    exchange.keep_alive = False
        except httptools.HttpParserError:
            self.refuse(400, b"Bad Request")
            return
        if self.refused:
            return
        if self.header_bytes > self.limits.max_header_bytes:
            self.refuse(431, b"Request Header Fields Too Large")
            return
        if self.phase is Phase.HEADERS and self.completed == completed:
            self.received_bytes += len(data)
            if self.received_bytes > self.limits.max_header_bytes:
                self.refuse(431, b"Request Header Fields Too Large")

    def eof_received(self) -> None:
        """The client will send nothing more: the transport closes (no half-open
        connections; an answer in progress is not sent)."""

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        self._resume_writers()

    # ---------------------------------------------------------------- parser callbacks

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.expect_continue = False
        self.header_bytes = self.received_bytes = 0
        if self.phase is not Phase.HEADERS:
            self._expect(Phase.HEADERS, self.limits.header_timeout_s)

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.header_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_continue = True
        self.headers.append((name, value))
        self.header_bytes += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        if self.refused:
            return  # the parser goes on through the rest of the data: nothing more is served
        if self.header_bytes > self.limits.max_header_bytes:
            # Now, not after the data is parsed: a request pipelined behind this one would
            # start the next message and hide the count.
            self.refuse(431, b"Request Header Fields Too Large")
            return
        parser = self.parser
        version = parser.get_http_version()
        scope = self._scope(parser.get_method().decode("ascii"), version)
        face = self.state.face
        exchange = Exchange(
            self,
            scope,
            keep_alive=version != "1.0" and parser.should_keep_alive(),
            expect_continue=self.expect_continue,
            handler=face.handler(scope) if face is not None else None,
        )
        self.parsing = exchange
        self._expect(Phase.BODY, self.limits.body_timeout_s)
        if self.current is None:
            self._start(exchange)
        else:
            self.waiting.append(exchange)  # pipelined: answered after the one before
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        exchange = self.parsing
        if exchange is None or exchange.complete:
            return
        if exchange.add_body(body) > HIGH_WATER:
            self.pause_reading()
            exchange.wake()  # its reader takes what is held, and reading starts again

    def on_message_complete(self) -> None:
        exchange, self.parsing = self.parsing, None
        self.completed += 1
        self.phase, self.deadline = Phase.ANSWERING, None
        if exchange is not None:
            exchange.end_body()

    # ---------------------------------------------------------------- requests and answers

    def _scope(self, method: str, version: str) -> dict[str, Any]:
        url = httptools.parse_url(self.url)
        raw_path: bytes = url.path
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        return {
            "type": "http",
            "asgi": _ASGI,
            "http_version": version,
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": method,
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "headers": self.headers,
            "state": self.state.app_state.copy(),
        }

    def _start(self, exchange: Exchange) -> None:
        self.current = exchange
        task = self.loop.create_task(exchange.run(self.app))
        tasks = self.state.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def answered(self, exchange: Exchange) -> None:
        """``exchange``'s answer is complete: the next request, or the keep-alive wait."""
        if exchange is not self.current:
            return
        self.current = None
        if self.closing():
            return
        if self.pending_refusal is not None:
            self.write((self.pending_refusal,))
            self.close()
            return
        if not exchange.keep_alive:
            self.close()
            return
        if self.read_paused:
            self.resume_reading()
        if self.waiting:
            self._start(self.waiting.popleft())
        elif self.phase is Phase.ANSWERING:
            self._expect(Phase.KEEP_ALIVE, self.limits.keep_alive_timeout_s)

    def write(self, pieces: Iterable[bytes | memoryview]) -> None:
        assert self.transport is not None
        self.transport.writelines(pieces)

    async def drain(self) -> None:
        """Wait until the client reads again (the transport's buffer is below its mark)."""
        if not self.write_paused or self.closing():
            return
        waiter = self.loop.create_future()
        self.drained.append(waiter)
        await waiter

    def _resume_writers(self) -> None:
        drained, self.drained = self.drained, []
        for waiter in drained:
            if not waiter.done():
                waiter.set_result(None)

    def pause_reading(self) -> None:
        if not self.read_paused and self.transport is not None and not self.closing():
            self.read_paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused and self.transport is not None and not self.closing():
            self.read_paused = False
            self.last_data = self.loop.time()  # a pause of the server's own does not count
            self.transport.resume_reading()

    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def shutdown(self) -> None:
        """The server stops: an idle connection closes now, a busy one after its answer."""
        if self.current is None:
            self.close()
            return
        self.current.keep_alive = False
        self.waiting.clear()

    def refuse(self, status: int, reason: bytes) -> None:
        """Answer ``status`` and close; nothing more is read. A request being answered is
        answered first: the refusal follows its answer."""
        self.refused = True
        self.deadline = None
        self.waiting.clear()
        current = self.current
        date = self.state.default_head
        refusal = b"HTTP/1.1 %d %s\r\n%scontent-type: text/plain; charset=utf-8\r\n" % (
            status,
            reason,
            date,
        ) + b"content-length: %d\r\nconnection: close\r\n\r\n%s\n" % (len(reason) + 1, reason)
        if current is None or current.complete:
            self.write((refusal,))
            self.close()
        elif current.started:
            current.keep_alive = False  # its answer is on the way: then the connection closes
        else:
            current.keep_alive = False
            self.pending_refusal = refusal

    # ---------------------------------------------------------------- deadlines

    def _expect(self, phase: Phase, within_s: float) -> None:
        self.phase = phase
        when = self.loop.time() + within_s
        self.deadline = when
        timer = self.timer
        if timer is None or timer.when() > when:
            if timer is not None:
                timer.cancel()
            self.timer = self.loop.call_at(when, self._deadline_passed)

    def _deadline_passed(self) -> None:
        self.timer = None
        when = self.deadline
        if when is None or self.closing():
            return
        now = self.loop.time()
        if now < when:  # a later deadline than the timer was armed for: wait on
            self.timer = self.loop.call_at(when, self._deadline_passed)
            return
        if self.phase is Phase.HEADERS:
            self.refuse(408, b"Request Timeout")
        elif self.phase is Phase.KEEP_ALIVE:
            self.close()
        elif self.phase is Phase.BODY:
            paused = now - self.last_data
            timeout = self.limits.body_timeout_s
            if self.read_paused or paused < timeout:
                self._expect(Phase.BODY, timeout - paused if paused < timeout else timeout)
            else:
                self._body_stalled()

    def _body_stalled(self) -> None:
        self.deadline = None
        exchange = self.parsing
        if exchange is None or exchange is not self.current or exchange.started:
            self.close()  # nobody can be told: let go of the connection
            return
        exchange.keep_alive = False
        exchange.scope[BODY_STALLED] = True
        exchange.wake()  # the pending body read ends; the app answers 408


def _address(address: Any) -> tuple[str, int] | None:
    if isinstance(address, tuple | list) and len(address) >= 2:
        return str(address[0]), int(address[1])
    return None

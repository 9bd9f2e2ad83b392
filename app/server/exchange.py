"""One request and its answer: the ASGI ``receive`` and ``send`` of an HTTP/1.1 exchange.

The request body reaches the app as the connection parses it (``receive``); the answer's
status line and headers are held until its first body bytes, so a whole small answer leaves
in one write — one system call, and one wake-up of the client instead of two. An answer
without a ``Content-Length`` is sent chunked (close-delimited to an HTTP/1.0 client); a HEAD
request's answer has its headers only.

A :class:`WireFace` may take some requests below ASGI: the connection asks it for each
request's handler once the headers are parsed, and the handler reads the whole body
(:meth:`Exchange.read_body`) and writes the whole answer (:meth:`Exchange.respond`) — no ASGI
messages in between. Everything else about the exchange (deadlines, 100-continue, pipelining,
keep-alive, the access log) is the same for both.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any, Final, Protocol

from app.server.limits import BODY_STALLED

if TYPE_CHECKING:
    from app.server.connection import HttpConnection

log = logging.getLogger("spoolmq.server")
access_log = logging.getLogger("spoolmq.access")

Message = dict[str, Any]
App = Callable[[dict[str, Any], Callable[..., Any], Callable[..., Any]], Any]

Handler = Callable[["Exchange"], Awaitable[None]]
"""How a wire face answers one request: it reads and answers it through the exchange."""


class WireFace(Protocol):
    """Takes the requests it serves below ASGI; the ASGI app gets every other."""

    def handler(self, scope: dict[str, Any]) -> Handler | None:
        """The handler of the request ``scope`` describes (its headers are parsed, its body
        may still be coming), or None to leave it to the app. The face may add to ``scope``."""


class BodyTooLargeError(Exception):
    """The request body passed the size :meth:`Exchange.read_body` was given."""


class BodyStalledError(Exception):
    """The client stopped sending the request body (:data:`BODY_STALLED`)."""


class ClientGoneError(Exception):
    """The client went away before its request was read."""


DISCONNECT: Final[Message] = {"type": "http.disconnect"}
_NO_BODY_STATUSES: Final = frozenset({204, 304})


def _status_lines() -> dict[int, bytes]:
    lines = {}
    for status in HTTPStatus:
        lines[status.value] = b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode())
    return lines


STATUS_LINES: Final = _status_lines()


class Exchange:
    """One request on a connection, from its headers to the end of its answer."""

    __slots__ = (
        "bodiless",
        "body",
        "chunked",
        "complete",
        "connection",
        "disconnected",
        "end_given",
        "expect_continue",
        "handler",
        "head",
        "held",
        "keep_alive",
        "more_body",
        "remaining",
        "scope",
        "started",
        "status",
        "waiter",
        "wake_above",
    )

    def __init__(
        self,
        connection: HttpConnection,
        scope: dict[str, Any],
        keep_alive: bool,
        expect_continue: bool,
        handler: Handler | None = None,
    ) -> None:
        self.connection = connection
        self.scope = scope
        self.keep_alive = keep_alive
        self.expect_continue = expect_continue
        self.handler = handler
        # request
        self.body: list[bytes] = []
        self.held = 0  # the bytes of ``body``
        self.wake_above = 0  # a reader waits for more than this many bytes of it
        self.more_body = True  # the request's body is still coming
        self.end_given = False  # the body's last message went to the app
        self.waiter: asyncio.Future[None] | None = None
        self.disconnected = False
        # answer
        self.started = False
        self.complete = False
        self.status = 0
        self.head: bytes | None = None  # the status line and headers, not written yet
        self.bodiless = False  # an answer to HEAD, a 1xx, 204 or 304: headers only
        self.chunked = False
        self.remaining: int | None = None  # the Content-Length still to send

    # ---------------------------------------------------------------- what the connection says

    def add_body(self, piece: bytes) -> int:
        """A piece of the request body arrived; how many bytes are now held for the app."""
        self.body.append(piece)
        self.held += len(piece)
        if self.held > self.wake_above and self.waiter is not None:
            self.wake()
        return self.held

    def end_body(self) -> None:
        self.more_body = False
        if self.waiter is not None:
            self.wake()

    def lost(self) -> None:
        """The client went away."""
        if not self.complete:
            self.disconnected = True
        self.wake()

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # ---------------------------------------------------------------- ASGI

    async def run(self, app: App) -> None:
        """Let the wire face's handler answer, else ``app``; a failure before the answer
        started is a plain 500."""
        connection = self.connection
        try:
            if self.handler is not None:
                await self.handler(self)
            else:
                await app(self.scope, self.receive, self.send)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.error(
                    "the app failed on %s %s",
                    self.scope["method"],
                    self.scope["path"],
                    exc_info=exc,
                )
            if self.complete:
                pass  # it went out whole (a background task failed): the connection goes on
            elif self.started or self.disconnected:
                connection.close()
            else:
                self.keep_alive = False
                await self.send_plain(500, b"Internal Server Error")
            if isinstance(exc, asyncio.CancelledError):
                raise
        else:
            if not self.complete and not self.disconnected:
                log.error(
                    "the app returned without finishing its answer to %s %s",
                    self.scope["method"],
                    self.scope["path"],
                )
                if self.started:
                    connection.close()
                else:
                    self.keep_alive = False
                    await self.send_plain(500, b"Internal Server Error")
        finally:
            if not self.complete:
                self.complete = True
                connection.answered(self)

    async def receive(self) -> Message:
        if self.expect_continue:
            self._continue()
        while True:
            if self.disconnected or self.complete:
                return DISCONNECT
            if self.body or (not self.more_body and not self.end_given):
                return self._body_message()
            if self.scope.get(BODY_STALLED):
                if self.end_given:
                    return DISCONNECT
                self.end_given = True  # the app is told once; then the client counts as gone
                return {"type": "http.request", "body": b"", "more_body": True}
            await self._more_body()

    # ---------------------------------------------------------------- wire face

    async def read_body(self, limit: int) -> bytes:
        """The whole request body, for a wire face's handler. BodyTooLargeError once it
        passes ``limit`` bytes, BodyStalledError when the client stops sending it,
        ClientGoneError when the client went away."""
        if self.expect_continue:
            self._continue()
        pieces: list[bytes] = []
        size = 0
        # Woken at the body's end (or when the connection stops reading), not for each piece.
        self.wake_above = limit
        while True:
            if self.disconnected or self.complete:
                raise ClientGoneError
            if self.body:
                size += self.held
                pieces += self.body
                self.body, self.held = [], 0
                if size > limit:
                    raise BodyTooLargeError
                self.wake_above = limit - size
            if not self.more_body:
                self.end_given = True
                self.wake_above = 0
                if not pieces:
                    return b""
                return pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if self.scope.get(BODY_STALLED):
                raise BodyStalledError
            await self._more_body()

    def respond(
        self, status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes | memoryview
    ) -> None:
        """The whole answer at once, in one write, for a wire face's handler (a HEAD
        request's without its body). The transport holds what the client has not read yet:
        an answer is as large as its body, no flow control is needed for it."""
        if self.started:
            raise RuntimeError("the answer has started already")
        self._start(status, headers)
        self._finish(body, more=False)

    def _continue(self) -> None:
        """The client waits for a go-ahead before it sends the body: the body is read now."""
        self.expect_continue = False
        if not self.connection.closing():
            self.connection.write((b"HTTP/1.1 100 Continue\r\n\r\n",))

    async def _more_body(self) -> None:
        """Wait for more of the body (or the end of it, or its stall, or the client gone)."""
        connection = self.connection
        connection.resume_reading()
        waiter = self.waiter = connection.loop.create_future()
        try:
            await waiter
        finally:
            self.waiter = None

    def _body_message(self) -> Message:
        pieces, self.body = self.body, []
        self.held = 0
        body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        if not self.more_body:
            self.end_given = True
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', not {kind!r}")
            self._start(message["status"], message.get("headers", ()))
            return
        if self.complete:
            raise RuntimeError(f"{kind!r} after the answer was complete")
        if kind != "http.response.body":
            raise RuntimeError(f"expected 'http.response.body', not {kind!r}")
        body = message.get("body", b"")
        more = message.get("more_body", False)
        connection = self.connection
        if connection.write_paused and not self.disconnected:
            await connection.drain()
        self._finish(body, more)

    def _finish(self, body: bytes | memoryview, more: bool) -> None:
        """Write a piece of the answer's body (the held head first); the last completes it."""
        connection = self.connection
        pieces = self._framed(body, more)
        if not self.disconnected:
            connection.write(pieces)
        if not more:
            if self.remaining:
                raise RuntimeError("the answer is shorter than its Content-Length")
            self.complete = True
            if self.waiter is not None:
                self.wake()  # a pending receive now answers http.disconnect
            connection.answered(self)

    # ---------------------------------------------------------------- the answer

    def _start(self, status: int, headers: Any) -> None:
        self.started = True
        self.expect_continue = False
        self.status = status
        connection = self.connection
        line = STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status
        head = [line, connection.state.default_head]
        length: int | None = None
        chunked = closes = False
        for name, value in headers:
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value.lower() == b"chunked"
            elif name == b"connection" and b"close" in value.lower():
                closes = True
                self.keep_alive = False
            if name not in _CHECKED_NAMES:
                _check_name(name)
            if _CONTROL.search(value):
                raise RuntimeError(f"an invalid HTTP header value: {name!r}")
            head += (name, b": ", value, b"\r\n")
        scope = self.scope
        self.bodiless = scope["method"] == "HEAD" or status in _NO_BODY_STATUSES or status < 200
        if self.bodiless:
            pass
        elif chunked or length is None:
            if scope["http_version"] == "1.0":
                self.keep_alive = False  # the end of the body is the end of the connection
            else:
                self.chunked = True
                if not chunked:
                    head.append(b"transfer-encoding: chunked\r\n")
        else:
            self.remaining = length
        if not self.keep_alive and not closes:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self.head = b"".join(head)
        if connection.limits.access_log:
            path = scope["path"]
            if scope["query_string"]:
                path += "?" + scope["query_string"].decode("latin-1")
            client = scope.get("client")
            who = f"{client[0]}:{client[1]}" if client else "-"
            access_log.info(
                '%s - "%s %s HTTP/%s" %d', who, scope["method"], path, scope["http_version"], status
            )

    def _framed(self, body: bytes | memoryview, more: bool) -> list[bytes | memoryview]:
        """What to write for a piece of the answer's body: the held head first."""
        pieces: list[bytes | memoryview] = []
        if self.head is not None:
            pieces.append(self.head)
            self.head = None
        if self.bodiless:
            return pieces
        if self.chunked:
            if body:
                pieces += (b"%x\r\n" % len(body), body, b"\r\n")
            if not more:
                pieces.append(b"0\r\n\r\n")
        elif body:
            if self.remaining is not None:
                if len(body) > self.remaining:
                    raise RuntimeError("the answer is longer than its Content-Length")
                self.remaining -= len(body)
            pieces.append(body)
        return pieces

    async def send_plain(self, status: int, text: bytes) -> None:
        """A plain-text answer the server makes itself (its connection then closes)."""
        self.keep_alive = False
        await self.send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"content-length", b"%d" % len(text)),
                ],
            }
        )
        await self.send({"type": "http.response.body", "body": text})


_TOKEN: Final = b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
"""The bytes of a header name (RFC 9110's token)."""
_CONTROL: Final = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""What a header value may not hold: a control character other than a tab."""


_CHECKED_NAMES: Final[set[bytes]] = set()
"""Header names found valid: an app answers with a handful, checked once each."""
_MAX_CHECKED_NAMES: Final = 1024


def _check_name(name: bytes) -> None:
    """A header name the client could not parse — one that may even break the answer's
    framing — is the app's bug, not sent (as a value with a control character is not)."""
    if not name or name.translate(None, _TOKEN):
        raise RuntimeError(f"an invalid HTTP header: {name!r}")
    if len(_CHECKED_NAMES) < _MAX_CHECKED_NAMES:
        _CHECKED_NAMES.add(name)

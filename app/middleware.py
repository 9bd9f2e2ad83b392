"""The HTTP shell around every request: request ids, the body-size cap, path decoding, 500s.

:class:`HttpShellMiddleware` applies these rules to every request an app gets through ASGI;
the wire face of the proxy (:mod:`app.routes.wire`) applies them, with the functions below, to
the requests it takes.

* ``X-Request-Id``: the client's (when it is a sane token) or a new one, on every response —
  problem responses included — and in ``scope["state"]["request_id"]``.
* Body cap: a ``Content-Length`` over the limit is answered with 413 before a byte of the body
  is read; a chunked body is counted while the app reads it and refused once it passes the
  limit. 413 answers close the connection, so the rest of the body is never read.
* Stalled body: when the server finds that a client stopped sending its body
  (:data:`~app.server.BODY_STALLED` set in the scope), the read fails and the
  answer is 408 with the connection closed; the request's task ends instead of waiting.
* A path segment that decodes to something holding ``/`` (``..%2F``) keeps it as U+2215
  (division slash):
  the route still matches, and the handler refuses the name as invalid.
* An unexpected exception becomes a 500 problem that still carries the request id.
"""

from __future__ import annotations

import itertools
import logging
import re
import secrets
from typing import Final
from urllib.parse import unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PROBLEM_MEDIA_TYPE, problem_body
from app.server import BODY_STALLED

log = logging.getLogger(__name__)

_REQUEST_ID: Final = re.compile(rb"^[A-Za-z0-9._:/+=@-]{1,128}$")
_SLASH_STANDIN: Final = "\u2215"
_ID_PREFIX: Final = secrets.token_hex(8)
_ID_COUNTER: Final = itertools.count(secrets.randbelow(1 << 32))


class _BodyTooLargeError(Exception):
    """Raised from receive() once a streamed body passes the cap."""


class _BodyTimeoutError(Exception):
    """Raised from receive() when the client stalls while sending the body."""


class HttpShellMiddleware:
    def __init__(self, app: ASGIApp, max_request_bytes: int) -> None:
        self.app = app
        self.max_request_bytes = max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id, declared = request_id_and_length(scope)
        scope.setdefault("state", {})["request_id"] = request_id
        id_header = (b"x-request-id", request_id.encode())
        keep_encoded_slashes(scope)
        limit = self.max_request_bytes
        if declared is not None and declared > limit:
            await _send_too_large(scope, send, id_header, limit, declared)
            return
        exchange = _Exchange(receive, send, id_header, limit, scope)
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except Exception:
            if exchange.started:
                raise
            if exchange.too_large:
                await _send_too_large(scope, send, id_header, limit, None)
                return
            if exchange.timed_out:
                await _send_timeout(scope, send, id_header)
                return
            log.exception(
                "unhandled error in %s %s (request %s)", scope["method"], scope["path"], request_id
            )
            await _send_problem(send, 500, internal_error_problem(scope, request_id), id_header)


class _Exchange:
    """Wraps receive (counting body bytes) and send (adding the request id)."""

    __slots__ = (
        "_receive",
        "_send",
        "id_header",
        "limit",
        "path",
        "received",
        "scope",
        "started",
        "timed_out",
        "too_large",
    )

    def __init__(
        self, receive: Receive, send: Send, id_header: tuple[bytes, bytes], limit: int, scope: Scope
    ) -> None:
        self.scope = scope
        self.path: str = scope["path"]
        self._receive = receive
        self._send = send
        self.id_header = id_header
        self.limit = limit
        self.received = 0
        self.started = False
        self.too_large = False
        self.timed_out = False

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            body = message.get("body", b"")
            if not body and message.get("more_body", False) and self.scope.get(BODY_STALLED):
                self.timed_out = True
                raise _BodyTimeoutError
            self.received += len(body)
            if self.received > self.limit:
                self.too_large = True
                raise _BodyTooLargeError
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if self.too_large or self.timed_out:
                # The app turned the aborted read into some error answer: replace it.
                self.started = True
                request_id = self.id_header[1].decode()
                if self.too_large:
                    status, body = 413, too_large_problem(self.limit, None, self.path, request_id)
                else:
                    status, body = 408, stalled_body_problem(self.path, request_id)
                await _send_problem(self._send, status, body, self.id_header, close=True)
                return
            self.started = True
            message["headers"] = [*message.get("headers", ()), self.id_header]
        elif self.too_large or self.timed_out:
            return  # the body of the answer replaced above
        await self._send(message)


def request_id_and_length(scope: Scope) -> tuple[str, int | None]:
    """The client's ``X-Request-Id`` when it is a valid one, else a new id; and the request's
    Content-Length, None when it has none (or not a number)."""
    request_id: str | None = None
    length: int | None = None
    seen_id = seen_length = False
    for name, value in scope["headers"]:
        if name == b"x-request-id" and not seen_id:
            seen_id = True
            if _REQUEST_ID.match(value):
                request_id = bytes(value).decode()
        elif name == b"content-length" and not seen_length:
            seen_length = True
            try:
                length = int(value)
            except ValueError:
                pass  # not a number: as if there were none
    if request_id is None:
        # A random per-process prefix and a counter: unique, cheaper than os.urandom per request.
        request_id = f"{_ID_PREFIX}{next(_ID_COUNTER) & 0xFFFFFFFFFFFFFFFF:016x}"
    return request_id, length


def internal_error_problem(scope: Scope, request_id: str) -> bytes:
    """The 500 problem for an unexpected error (logged where it was caught)."""
    return problem_body(
        500, "INTERNAL_ERROR", "the server failed; see its log", scope["path"], request_id
    )


def keep_encoded_slashes(scope: Scope) -> None:
    """A path segment that decodes to something holding ``/`` keeps it as U+2215."""
    raw = scope.get("raw_path")
    if not raw or b"%2" not in raw.upper():
        return
    path = raw.split(b"?", 1)[0].decode("latin-1")
    if "%2f" not in path.lower():
        return
    segments = [unquote(s).replace("/", _SLASH_STANDIN) for s in path.split("/")]
    scope["path"] = "/".join(segments)


def too_large_problem(limit: int, declared: int | None, path: str, request_id: str) -> bytes:
    """The 413 problem for a body over ``limit`` (``declared``: its Content-Length)."""
    size = f"{declared} bytes" if declared is not None else "more than that"
    return problem_body(
        413,
        "REQUEST_TOO_LARGE",
        f"the request body may be at most {limit} bytes; this one is {size}",
        path,
        request_id,
    )


async def _send_too_large(
    scope: Scope, send: Send, id_header: tuple[bytes, bytes], limit: int, declared: int | None
) -> None:
    body = too_large_problem(limit, declared, scope["path"], id_header[1].decode())
    await _send_problem(send, 413, body, id_header, close=True)


def stalled_body_problem(path: str, request_id: str) -> bytes:
    """The 408 problem for a request whose body stopped arriving (its connection is closed)."""
    return problem_body(
        408, "REQUEST_TIMEOUT", "the request body stopped arriving", path, request_id
    )


async def _send_timeout(scope: Scope, send: Send, id_header: tuple[bytes, bytes]) -> None:
    body = stalled_body_problem(scope["path"], id_header[1].decode())
    await _send_problem(send, 408, body, id_header, close=True)


def problem_headers(
    body: bytes, id_header: tuple[bytes, bytes], close: bool = False
) -> list[tuple[bytes, bytes]]:
    """The headers of a problem answer the shell makes itself (``close``: the connection
    closes after it)."""
    headers = [
        (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
        (b"content-length", str(len(body)).encode()),
        id_header,
    ]
    if close:
        headers.append((b"connection", b"close"))
    return headers


async def _send_problem(
    send: Send, status: int, body: bytes, id_header: tuple[bytes, bytes], close: bool = False
) -> None:
    headers = problem_headers(body, id_header, close)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""An app's direct operations served below ASGI: the server's wire face for them.

:class:`EndpointFace` is a :class:`~app.server.WireFace`: the server asks it, once a request's
headers are parsed, whether the request is one of the app's direct operations
(:class:`~app.routes.direct.DirectOperations`); if so the face reads the whole body from the
server's exchange (a POST's, PUT's or PATCH's), calls the operation's endpoint — the same
endpoint, arguments and error handlers as FastAPI's route — and writes the endpoint's answer in
one piece. No ASGI messages, no middleware: for a proxy, whose requests are small and whose
work is passing them on, those cost a request as much as its routing
(``bench/proxy_cpu_bench.py``).

The face keeps the rules of the HTTP shell (:mod:`app.middleware`) for the requests it takes:
the request id (the client's or a new one, on every answer), encoded slashes kept in path
segments, 413 for a body over the cap (before it is read when its Content-Length says so), 408
when the body stops arriving, and a 500 problem for an unexpected error. Which requests it
takes is fixed by the operations' routes: a request is the face's or the app's from its
headers on, never handed over.
"""

from __future__ import annotations

import logging
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from app.middleware import (
    declared_length,
    internal_error_problem,
    keep_encoded_slashes,
    problem_headers,
    request_id_of,
    stalled_body_problem,
    too_large_problem,
)
from app.routes.direct import DirectOperations, EndpointArguments
from app.server import (
    BodyStalledError,
    BodyTooLargeError,
    ClientGoneError,
    Exchange,
    Handler,
)

log = logging.getLogger(__name__)

_REQUEST_ID: Final = b"x-request-id"
_BODY_METHODS: Final = frozenset(("POST", "PUT", "PATCH"))
"""The methods whose body the face reads before the endpoint runs (a GET's it leaves unread,
as its endpoint does)."""


class EndpointFace:
    """Serves ``direct``'s operations below ASGI, bodies up to ``max_request_bytes``."""

    def __init__(self, direct: DirectOperations, max_request_bytes: int) -> None:
        self.direct = direct
        self.max_request_bytes = max_request_bytes
        self._handlers: dict[int, Handler] = {}  # by the id of an operation's arguments

    def handler(self, scope: dict[str, Any]) -> Handler | None:
        keep_encoded_slashes(scope)
        arguments = self.direct.take(scope)
        if arguments is None:
            return None
        handler = self._handlers.get(id(arguments))
        if handler is None:
            handler = self._handlers[id(arguments)] = _Operation(self, arguments).serve
        return handler


class _Operation:
    """One direct operation as the face serves it."""

    __slots__ = ("arguments", "direct", "limit")

    def __init__(self, face: EndpointFace, arguments: EndpointArguments) -> None:
        self.direct = face.direct
        self.arguments = arguments
        self.limit = face.max_request_bytes

    async def serve(self, exchange: Exchange) -> None:
        scope = exchange.scope
        request_id = request_id_of(scope)
        scope["state"]["request_id"] = request_id
        id_header = (_REQUEST_ID, request_id.encode())
        declared = declared_length(scope)
        receive = exchange.receive  # a request without a body to read (a GET's)
        try:
            if declared is not None and declared > self.limit:
                raise BodyTooLargeError
            if scope["method"] in _BODY_METHODS:
                receive = _ReadBody(await exchange.read_body(self.limit), exchange).receive
        except BodyTooLargeError:
            problem = too_large_problem(self.limit, declared, scope["path"], request_id)
            exchange.respond(413, problem_headers(problem, id_header, close=True), problem)
            return
        except BodyStalledError:
            problem = stalled_body_problem(scope["path"], request_id)
            exchange.respond(408, problem_headers(problem, id_header, close=True), problem)
            return
        except ClientGoneError:
            return
        request = Request(scope, receive)
        try:
            response = await self.direct.answer(self.arguments, request)
        except Exception:
            log.exception(
                "unhandled error in %s %s (request %s)", scope["method"], scope["path"], request_id
            )
            problem = internal_error_problem(scope, request_id)
            exchange.respond(500, problem_headers(problem, id_header), problem)
            return
        _answer(exchange, response, id_header)
        if response.background is not None:
            await response.background()


def _answer(exchange: Exchange, response: Response, id_header: tuple[bytes, bytes]) -> None:
    """Write ``response`` (a whole body: a direct operation answers with no stream)."""
    exchange.respond(response.status_code, [*response.raw_headers, id_header], response.body)


class _ReadBody:
    """The ASGI ``receive`` an endpoint gets: the body the face read, then the exchange's own
    (which tells when the client goes away)."""

    __slots__ = ("body", "exchange")

    def __init__(self, body: bytes, exchange: Exchange) -> None:
        self.body: bytes | None = body
        self.exchange = exchange

    async def receive(self) -> dict[str, Any]:
        body = self.body
        if body is None:
            return await self.exchange.receive()
        self.body = None
        return {"type": "http.request", "body": body, "more_body": False}

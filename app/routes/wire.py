"""An app's direct operations served below ASGI: the server's wire face for them.

:class:`EndpointFace` is a :class:`~app.server.WireFace`: the server asks it, once a request's
headers are parsed, whether the request is one of the app's direct operations
(:class:`~app.routes.direct.DirectOperations`); if so the face reads the whole body from the
server's exchange (a POST's, PUT's or PATCH's), calls the operation's endpoint — the same
endpoint, arguments and error handlers as FastAPI's route — and writes the endpoint's answer in
one piece. The body read goes to the endpoint in the request's scope (:func:`app.deps.read_body`
takes it there), or through its ``receive`` for an endpoint that reads it otherwise. No ASGI
messages, no middleware: for a proxy, whose requests are small and whose work is passing them
on, those cost a request as much as its routing (``bench/proxy_cpu_bench.py``).

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

from app.deps import BODY_READ
from app.middleware import (
    internal_error_problem,
    keep_encoded_slashes,
    problem_headers,
    request_id_and_length,
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
        if b"%" in scope["raw_path"]:
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
        request_id, declared = request_id_and_length(scope)
        scope["state"]["request_id"] = request_id
        id_header = (_REQUEST_ID, request_id.encode())
        try:
            if declared is not None and declared > self.limit:
                raise BodyTooLargeError
            if scope["method"] in _BODY_METHODS:
                scope[BODY_READ] = await exchange.read_body(self.limit)
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

        async def receive() -> dict[str, Any]:
            """The body read above — unless the endpoint took it from the scope
            (:func:`app.deps.read_body`, which saves this call) — then the exchange's own
            ``receive`` (which tells when the client goes away)."""
            body = scope.pop(BODY_READ, None)
            if body is not None:
                return {"type": "http.request", "body": body, "more_body": False}
            return await exchange.receive()

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
        # a whole body: a direct operation answers with no stream
        exchange.respond(response.status_code, [*response.raw_headers, id_header], response.body)
        if response.background is not None:
            await response.background()

"""The proxy's HTTP server protocol: uvicorn's httptools protocol, with the hot routes answered
below ASGI.

Through ASGI, a proxied send's answer crossed the HTTP shell's wrappers, two ASGI messages and
two writes to the client (head, then body): every write is a system call that, on loopback,
also runs the client's receive path and wakes it, and the head alone woke it for nothing. For a
request :class:`~app.proxy.fast.FastLane` serves (send, pull of one queue, group pull, POP
receive), :class:`ProxyHttpProtocol` calls the same endpoint with the same request scope and
writes the answer — status line, headers, the request's ``X-Request-Id`` and body — in one
write. What the HTTP shell (:class:`~app.middleware.HttpShellMiddleware`) does is done here the
same way: the client's request id or a new one, the FastAPI app's handlers for errors, a 500
problem with the request id for anything unexpected. A hot route with a lean lane
(:mod:`app.proxy.lean`) is served from callbacks instead — no task, no endpoint — and hands
whatever it does not finish to the endpoint's way (:meth:`ProxyHttpProtocol.serve`).

Everything else takes the ASGI way unchanged, and so does a hot request that the shell would
treat specially: a body without a Content-Length, or one over the cap (413), a path with a
percent escape (encoded slashes), HTTP/1.0. Connections, keep-alive, pipelining, flow control
and shutdown stay uvicorn's: only the exchange of one request is replaced.

Slow or stalled clients are held to the brokers' limits
(:class:`~app.server.GuardedHttpToolsProtocol`): headers within their deadline and size cap
(408 / 431, closed), and a body that stops arriving answered 408 with the connection closed —
on a hot request as the shell answers it on the ASGI way.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle
from uvicorn.server import ServerState

from app.errors import PROBLEM_MEDIA_TYPE, problem_body
from app.middleware import BODY_STALLED, request_id_of, stalled_body_problem
from app.proxy.fast import FastLane, FastRoute
from app.server import GuardedHttpToolsProtocol

log = logging.getLogger(__name__)


def find_lane(app: Any) -> FastLane | None:
    """The :class:`FastLane` inside ``app``'s chain of wrappers (each keeps the next as
    ``.app``), or None."""
    for _ in range(16):
        if isinstance(app, FastLane):
            return app
        app = getattr(app, "app", None)
        if app is None:
            return None
    return None


class ProxyHttpProtocol(GuardedHttpToolsProtocol):
    """uvicorn's httptools protocol with the brokers' limits on slow clients; the proxy's hot
    routes are answered in one write."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.lane = find_lane(config.loaded_app)
        # One keep-alive timer for the connection, not one armed and cancelled per request:
        # an answered request sets the idle deadline, data from the client clears it, and the
        # timer, when it fires, closes a connection idle past it or waits on for it.
        self.idle_deadline: float | None = None
        self.idle_timer: asyncio.TimerHandle | None = None
        self.hot_body: HotBody | None = None
        # A hot request with a lean lane (app.proxy.lean), its body still coming.
        self.pending: tuple[HotBody, FastRoute, re.Match[str]] | None = None
        # The lean lane's exchange with a broker for this connection's request, if one is on.
        self.in_flight: Any = None

    def _unset_keepalive_if_required(self) -> None:
        self.idle_deadline = None

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.pending = None  # nobody to answer
        if self.in_flight is not None:
            self.in_flight.client_left(self.tasks)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def on_response_complete(self) -> None:
        # uvicorn's, but for the keep-alive timer.
        self.server_state.total_requests += 1
        if self.transport.is_closing():
            return
        self.idle_deadline = None
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self.idle_deadline = deadline = self.loop.time() + self.timeout_keep_alive
        if self.idle_timer is None:
            self.idle_timer = self.loop.call_at(deadline, self._idle_check)

    def _idle_check(self) -> None:
        self.idle_timer = None
        deadline = self.idle_deadline
        if deadline is None or self.transport.is_closing():
            return  # busy (the next answer arms the timer again), or closed
        if self.loop.time() < deadline:
            self.idle_timer = self.loop.call_at(deadline, self._idle_check)
            return
        self.timeout_keep_alive_handler()

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # Another app than the server's is uvicorn's own answer (over limit_concurrency).
        found = self._hot(cycle.scope) if app is self.app else None
        if found is None:
            super()._start_asgi_task(cycle, app)
            return
        # Its body is kept as the pieces the parser gives (uvicorn's cycle appends them to a
        # bytearray and copies that again for the app: two copies of a 100 KB batch).
        held = self.hot_body = HotBody(cycle)
        route, match = found
        # A pipelined request (its body read while the one before it was answered) goes the
        # endpoint's way: the lane would start it inside the answer to the one before.
        if route.lean is not None and cycle.more_body and not cycle.waiting_for_100_continue:
            if route.method == "GET":  # a pull reads no body: it goes now, as on the other ways
                self._go_lean(held, route, match)
            else:
                self.pending = (held, route, match)  # on_message_complete starts it
            return
        self.serve(held, functools.partial(self.lane.answer, route, match))  # type: ignore[union-attr]

    def on_message_complete(self) -> None:
        super().on_message_complete()
        pending = self.pending
        if pending is None or pending[0].cycle is not self.cycle or self.cycle.more_body:
            return
        self.pending = None
        self._go_lean(*pending)

    def _go_lean(self, held: HotBody, route: FastRoute, match: re.Match[str]) -> None:
        """The request on its route's lean lane, or, when the lane does not take it, the
        endpoint's way."""
        assert route.lean is not None and self.lane is not None
        try:
            taken = route.lean(self, held, match)
        except Exception:
            log.exception(
                "the lean lane failed to plan %s %s", route.method, held.cycle.scope["path"]
            )
            taken = False
        if not taken:
            self.serve(held, functools.partial(self.lane.answer, route, match))

    def _body_stalled(self) -> None:
        pending = self.pending
        super()._body_stalled()
        if pending is not None and pending[0].cycle is self.cycle:
            # Its endpoint's way reads the body, finds it stalled, and answers 408.
            self.pending = None
            held, route, match = pending
            self.serve(held, functools.partial(self.lane.answer, route, match))  # type: ignore[union-attr]

    # ---------------------------------------------------------------- serving hot requests

    def serve(self, held: HotBody, answer_of: Callable[[Request], Awaitable[Response]]) -> None:
        """Answer a hot request with what ``answer_of`` makes of it, in a task."""
        assert self.lane is not None
        self._spawn(_serve(self.lane, held, answer_of))

    def reply(self, cycle: RequestResponseCycle, response: Response, request_id: str) -> None:
        """Write a lean request's answer now, or, while the client reads nothing, once it
        reads again."""
        id_header = (b"x-request-id", request_id.encode())
        if cycle.flow.write_paused and not cycle.disconnected:
            self._spawn(_write_later(cycle, response, id_header))
            return
        _write_now(cycle, response, id_header)
        cycle.on_response = _nothing

    def fail(self, cycle: RequestResponseCycle, request_id: str) -> None:
        """A lean request met an unexpected error: 500, unless an answer was begun (close)."""
        if cycle.response_started:
            cycle.transport.close()
            return
        self.reply(cycle, _internal_error(cycle.scope["path"], request_id), request_id)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = self.loop.create_task(work)
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)

    def on_body(self, body: bytes) -> None:
        held = self.hot_body
        if held is None or held.cycle is not self.cycle:
            super().on_body(body)
            return
        cycle = held.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        # Neither paused at uvicorn's high-water mark nor woken per piece: the body is read
        # whole before it goes on anyway and its Content-Length is within the cap (`_hot`),
        # so a pause bounds nothing; the request is woken once, when the body is complete
        # (or the client gone). A 100 KB batch paid two epoll changes (system calls) and a
        # turn of the loop per piece for them.
        held.pieces.append(body)

    def _hot(self, scope: Any) -> tuple[Any, ...] | None:
        """The hot route of a request the shell would pass on as it is, else None."""
        lane = self.lane
        if lane is None or scope["type"] != "http" or scope["http_version"] != "1.1":
            return None
        if scope["raw_path"].find(b"%") >= 0:  # not `in`: it tries the byte as an int first
            return None
        limit: int = lane.app.state.limits.max_request_bytes
        length = 0
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    return None
            elif name == b"transfer-encoding":
                return None
        if length > limit:
            return None
        return lane.find(scope["method"], scope["path"])


class BodyStalledError(Exception):
    """The client stopped sending a hot request's body (the protocol's body deadline)."""


class HotBody:
    """A hot request's cycle and its body so far, as the parser's pieces."""

    __slots__ = ("cycle", "pieces", "stalled")

    def __init__(self, cycle: RequestResponseCycle) -> None:
        self.cycle = cycle
        self.stalled = False
        # A pipelined request's body (or its start) is in the cycle already.
        self.pieces: list[bytes] = [bytes(cycle.body)] if cycle.body else []
        cycle.body = bytearray()

    def whole(self) -> bytes:
        """The body received (all of it, once the request is complete), joined."""
        pieces = self.pieces
        if len(pieces) == 1:
            return pieces[0]
        body = b"".join(pieces)
        self.pieces = [body] if body else []
        return body

    async def read(self) -> bytes:
        """The whole body (joined if it came in pieces), as uvicorn's ``receive`` would have
        given it: ClientDisconnect if the client went away first, BodyStalledError if it
        stopped sending."""
        cycle = self.cycle
        if cycle.waiting_for_100_continue and not cycle.transport.is_closing():
            cycle.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            cycle.waiting_for_100_continue = False
        while cycle.more_body and not (cycle.disconnected or cycle.response_complete):
            cycle.flow.resume_reading()
            await cycle.message_event.wait()
            cycle.message_event.clear()
            if cycle.scope.get(BODY_STALLED):  # woken by the body deadline, not by the body
                self.stalled = True
                raise BodyStalledError()
        if cycle.disconnected or cycle.response_complete:
            raise ClientDisconnect()  # what Starlette raises on http.disconnect
        pieces, self.pieces = self.pieces, []
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)


class HotRequest(Request):
    """A hot request, its body read straight from the protocol's pieces: Starlette's
    ``body()`` goes through an async generator and a closing context manager, which cost a
    proxied send more than its own routing did."""

    _read: bytes | None = None

    def __init__(self, held: HotBody) -> None:
        super().__init__(cast(Any, held.cycle.scope), cast(Receive, held.cycle.receive))
        self.held = held

    async def body(self) -> bytes:
        if self._read is None:
            self._read = await self.held.read()
        return self._read


async def _serve(
    lane: FastLane, held: HotBody, answer_of: Callable[[Request], Awaitable[Response]]
) -> None:
    """One hot request, from its scope to its answer on the wire."""
    cycle = held.cycle
    scope: Any = cycle.scope
    request_id = scope["state"].get("request_id") or request_id_of(scope)
    scope["state"]["request_id"] = request_id
    scope["app"] = lane.app  # what request.app means in the endpoints
    id_header = (b"x-request-id", request_id.encode())
    try:
        request = HotRequest(held)
        try:
            response = await answer_of(request)
        except Exception as exc:
            # A client gone (a request handed on by the lean lane reads its body late) or a
            # stalled body is no error of the server's.
            if not (held.stalled or isinstance(exc, ClientDisconnect)):
                log.exception(
                    "unhandled error in %s %s (request %s)",
                    scope["method"],
                    scope["path"],
                    request_id,
                )
            response = _internal_error(scope["path"], request_id)
        if held.stalled:  # whatever the endpoint made of the failed read: 408, and close
            response = _stalled(scope["path"], request_id)
            cycle.keep_alive = False
        await _write(cycle, response, id_header)
        if response.background is not None:
            await response.background()
    except BaseException:
        if not cycle.response_complete:
            cycle.transport.close()  # nothing (whole) was written: the client sees the close
        raise
    finally:
        cycle.on_response = _nothing


async def _write_later(
    cycle: RequestResponseCycle, response: Response, id_header: tuple[bytes, bytes]
) -> None:
    try:
        await _write(cycle, response, id_header)
    except BaseException:
        if not cycle.response_complete:
            cycle.transport.close()
        raise
    finally:
        cycle.on_response = _nothing


def _nothing() -> None:
    """A cycle's ``on_response`` once its answer is written (it is called once)."""


def _stalled(path: str, request_id: str) -> Response:
    body = stalled_body_problem(path, request_id)
    return Response(body, 408, media_type=PROBLEM_MEDIA_TYPE)


def _internal_error(path: str, request_id: str) -> Response:
    body = problem_body(500, "INTERNAL_ERROR", "the server failed; see its log", path, request_id)
    return Response(body, 500, media_type=PROBLEM_MEDIA_TYPE)


async def _write(
    cycle: RequestResponseCycle, response: Response, id_header: tuple[bytes, bytes]
) -> None:
    """Status line, headers and body in one write, as uvicorn would have written them."""
    if cycle.flow.write_paused and not cycle.disconnected:
        await cycle.flow.drain()
    _write_now(cycle, response, id_header)


def _write_now(
    cycle: RequestResponseCycle, response: Response, id_header: tuple[bytes, bytes]
) -> None:
    if cycle.disconnected:
        return
    head = [STATUS_LINE[response.status_code]]
    for name, value in (*cycle.default_headers, *response.raw_headers, id_header):
        head.extend((name, b": ", value, b"\r\n"))
    if not cycle.keep_alive:
        head.append(b"connection: close\r\n")
    head.append(b"\r\n")
    cycle.response_started = cycle.response_complete = True
    # One write of both (uvloop sends its buffers with one writev): no copy of a large body.
    cycle.transport.writelines((b"".join(head), bytes(response.body)))
    cycle.message_event.set()
    if not cycle.keep_alive:
        cycle.transport.close()
    cycle.on_response()

"""The proxy's lean lane: a send, or a pull of one queue, served from protocol callbacks.

The way through the endpoints cost a proxied request five times what reading its HTTP did: a
task, a Starlette request, the endpoint's chain of coroutines, the attempt's state, the upstream
pool's slots and future, each woken in a turn of the event loop of its own. On this lane a
send is planned when its body is complete (in the protocol's ``on_message_complete``), a pull at
its headers (it reads no body); it is written to an idle keep-alive connection of the broker it
goes to, and answered when that connection has parsed the broker's answer (in its
``on_message_complete``): no task and no turn of the loop in between. Group pulls and POP
receives take it for a first round that asks one group (:mod:`app.proxy.lean_fanout`).

The lane takes only what it can finish on the first broker's answer with the rules of the way
through the endpoints; it hands everything else over, unchanged, to that way:

* before anything is written (a request the lane does not plan: not JSON, an unusual key, no
  route, no master, no idle connection), the request goes to its endpoint as it came;
* a send answered with anything but a 2xx, or not answered (it may have been written), goes on
  in :func:`~app.proxy.sending.resume_send` with its key, its time and the queue it went to —
  the at-most-once rules in one place;
* a pull not answered goes on to the group's next replica, as
  :meth:`~app.proxy.messages.PullPlan.pull` would have.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from app.errors import ApiError, is_json_media_type
from app.middleware import request_id_of
from app.proxy.context import ProxyLimits
from app.proxy.forward import BrokerNoAnswerError, broker_answer, forwarded
from app.proxy.messages import PullPlan, json_target, send_headers
from app.proxy.sending import (
    FirstAttempt,
    SendTarget,
    forward_send,
    own_key,
    receipts,
    resume_send,
    send_path,
)
from app.proxy.upstream import Connection, Upstream, UpstreamAnswer
from app.routes.idempotency import key_of
from services.cluster import BrokerMember, ClusterView, QueueRoute, topic_route
from services.errors import ServiceError

if TYPE_CHECKING:
    from app.proxy.protocol import HotBody, ProxyHttpProtocol

log = logging.getLogger(__name__)

PLANNING_ERRORS = (ApiError, ServiceError)
"""What planning a request may raise for a client's mistake or the cluster's state: the
request goes its endpoint's way, which answers it."""


def lean_send(protocol: ProxyHttpProtocol, held: HotBody, match: re.Match[str]) -> bool:
    """Start a send on the lean lane; False (nothing done) for the endpoint's way."""
    scope: Any = held.cycle.scope
    headers = scope["headers"]
    content_type, keyed = send_headers(headers)
    if not is_json_media_type(content_type):
        return False
    topic = match.group("topic")
    state = state_of(protocol)
    try:
        client_key = _client_key(headers) if keyed else None
        target = json_target(topic, held.whole(), client_key)
        view: ClusterView = state.registry.view
        queue = state.picker.pick(
            view,
            topic_route(view, topic),
            target.queue_id,
            target.sharding_key,
            idempotency_key=client_key,
        )
        # Made before a connection is taken: a connection taken is given back only by the
        # exchange (a body too deep to encode again is a client's mistake).
        body = target.body_for(queue.local_queue_id)
    except PLANNING_ERRORS:
        return False
    master = view.master_of(queue.group)
    line, connection = (
        connection_to(state, master, "POST", send_path(topic)) if master else ((b"", b""), None)
    )
    if master is None or connection is None:
        _send_the_full_way(protocol, held, target, queue)
        return True
    request_id = request_id_for(scope)
    key = client_key or own_key()
    head = [*line]
    forwarded(head, headers, request_id, None)
    length = sum(map(len, body)) if isinstance(body, tuple) else len(body)
    head += (b"idempotency-key: ", key.encode(), b"\r\ncontent-length: %d\r\n\r\n" % length)
    data = (b"".join(head), *body) if isinstance(body, tuple) else (b"".join(head), body)
    limits: ProxyLimits = state.limits
    exchange = _SendExchange(protocol, held, connection, master, request_id)
    exchange.target, exchange.queue, exchange.key = target, queue, key
    exchange.started = time.monotonic()
    if not exchange.start(data, min(limits.send_timeout_s, limits.send_attempt_timeout_s)):
        _send_the_full_way(protocol, held, target, queue)  # nothing written; picked once
    return True


def lean_pull(protocol: ProxyHttpProtocol, held: HotBody, match: re.Match[str]) -> bool:
    """Start a pull of one queue on the lean lane; False (nothing done) for the endpoint's
    way."""
    scope: Any = held.cycle.scope
    state = state_of(protocol)
    try:
        plan = PullPlan(state.registry.view, match["topic"], int(match["queue_id"]), scope)
    except PLANNING_ERRORS:
        return False
    if not plan.members:
        return False
    member = plan.members[0]
    line, connection = connection_to(state, member, "GET", plan.path)
    if connection is None:
        return False
    request_id = request_id_for(scope)
    head = get_head(line, scope["query_string"], scope["headers"], request_id)
    exchange = _PullExchange(protocol, held, connection, member, request_id)
    exchange.plan = plan
    return exchange.start((head,), plan.timeout_s)


def get_head(
    line: tuple[bytes, bytes], query: bytes, headers: list[tuple[bytes, bytes]], request_id: str
) -> bytes:
    """The head of a GET to a broker: the request line (``line``: up to its query, and the
    rest with the Host header), the client's headers a broker gets, the request's id."""
    head = [line[0], b"?", query, line[1]] if query else [*line]
    forwarded(head, headers, request_id, None)
    head.append(b"\r\n")
    return b"".join(head)


def _send_the_full_way(
    protocol: ProxyHttpProtocol, held: HotBody, target: SendTarget, queue: QueueRoute
) -> None:
    """A send planned here goes to the queue picked for it, the endpoint's way (a round
    robin's pick is made once)."""
    lane = protocol.lane
    assert lane is not None
    protocol.serve(held, lambda request: lane.settle(request, forward_send(request, target, queue)))


def state_of(protocol: ProxyHttpProtocol) -> Any:
    assert protocol.lane is not None
    return protocol.lane.app.state


def _client_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    return key_of(
        [value.decode("latin-1") for name, value in headers if name == b"idempotency-key"]
    )


def request_id_for(scope: Any) -> str:
    request_id = request_id_of(scope)
    scope["state"]["request_id"] = request_id
    return request_id


def connection_to(
    state: Any, member: BrokerMember, method: str, path: str
) -> tuple[tuple[bytes, bytes], Connection | None]:
    """The request line up to its query and the rest with the Host header, and an idle
    connection to ``member`` (None: none is idle, or no slot is free)."""
    origin, line, host = state.forwarder.line(member.http_url, method, path)
    upstream: Upstream = state.forwarder.upstream
    return (line, host), upstream.take_idle(origin)


class Exchange:
    """One lean request's exchange with a broker: the waiter its connection answers."""

    def __init__(
        self,
        protocol: ProxyHttpProtocol,
        held: HotBody,
        connection: Connection,
        member: BrokerMember,
        request_id: str,
    ) -> None:
        self.protocol = protocol
        self.held = held
        self.connection = connection
        self.member = member
        self.request_id = request_id
        self.finished = False
        self.ended: asyncio.Future[None] | None = None  # set when its client left meanwhile

    def start(self, data: tuple[bytes | memoryview, ...], timeout_s: float) -> bool:
        if self.connection.start(data, timeout_s, self):
            self.protocol.in_flight = self
            return True
        self._release()
        return False

    # ---------------------------------------------------------------- the connection's waiter

    def done(self) -> bool:
        return self.finished

    def set_result(self, answer: UpstreamAnswer, /) -> None:
        self.finished = True
        self._release()
        if self.cut_off():
            return
        try:
            self.answered(answer)
        except Exception:
            self._failed()
        finally:
            self._ended()

    def set_exception(self, exc: BaseException, /) -> None:
        self.finished = True
        self.connection.close()  # it is being closed: not to be pooled meanwhile
        self._release()
        if self.cut_off():
            return
        reason = getattr(exc, "reason", None) or repr(exc)
        try:
            self.not_answered(BrokerNoAnswerError(self.member, reason))
        except Exception:
            self._failed()
        finally:
            self._ended()

    def client_left(self, tasks: set[Any]) -> None:
        """Its client went away: the exchange is still the server's work, as a task would be
        on the endpoint's way — a graceful shutdown waits for it (uvicorn waits for the server's
        tasks) and, when that wait runs out, cancels it: the connection is closed."""
        ended: asyncio.Future[None] = self.protocol.loop.create_future()
        ended.add_done_callback(tasks.discard)
        ended.add_done_callback(self._cancelled)
        tasks.add(ended)
        self.ended = ended

    def cut_off(self) -> bool:
        """Whether the exchange was cancelled (nothing more is done for it)."""
        return self.ended is not None and self.ended.cancelled()

    def _cancelled(self, ended: asyncio.Future[None]) -> None:
        if ended.cancelled():
            self.connection.close()

    def _ended(self) -> None:
        if self.protocol.in_flight is self:
            self.protocol.in_flight = None
        if self.ended is not None and not self.ended.done():
            self.ended.set_result(None)

    # ---------------------------------------------------------------- what comes of it

    def answered(self, answer: UpstreamAnswer) -> None:
        raise NotImplementedError

    def not_answered(self, error: BrokerNoAnswerError) -> None:
        raise NotImplementedError

    def reply(self, response: Response) -> None:
        self.protocol.reply(self.held.cycle, response, self.request_id)

    def hand_over(self, answer_of: Callable[[Request], Awaitable[Response]]) -> None:
        """The rest of the request goes the endpoint's way, in a task."""
        self.protocol.serve(self.held, answer_of)

    def _release(self) -> None:
        upstream: Upstream = state_of(self.protocol).forwarder.upstream
        upstream.release(self.connection)

    def _failed(self) -> None:
        scope = self.held.cycle.scope
        log.exception(
            "unhandled error in %s %s (request %s)", scope["method"], scope["path"], self.request_id
        )
        self.protocol.fail(self.held.cycle, self.request_id)


class _SendExchange(Exchange):
    target: SendTarget
    queue: QueueRoute
    key: str
    started: float

    def answered(self, answer: UpstreamAnswer) -> None:
        passed = broker_answer(answer)
        if passed.ok:
            self.reply(receipts(passed, self.queue, self.target.client_key))
        else:
            self._resume(passed)

    def not_answered(self, error: BrokerNoAnswerError) -> None:
        self._resume(error)

    def _resume(self, outcome: Any) -> None:
        first = FirstAttempt(self.key, self.started, self.queue, outcome)
        target = self.target
        lane = self.protocol.lane
        assert lane is not None
        self.hand_over(lambda request: lane.settle(request, resume_send(request, target, first)))


class _PullExchange(Exchange):
    plan: PullPlan

    def answered(self, answer: UpstreamAnswer) -> None:
        self.reply(self.plan.answer(broker_answer(answer)))

    def not_answered(self, error: BrokerNoAnswerError) -> None:
        plan = self.plan
        lane = self.protocol.lane
        assert lane is not None
        rest = plan.members[1:]

        async def next_replicas(request: Request) -> Response:
            if not rest:
                raise error
            return await plan.pull(request, rest)

        self.hand_over(lambda request: lane.settle(request, next_replicas(request)))

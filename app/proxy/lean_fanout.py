"""The lean lane (:mod:`app.proxy.lean`) for group pulls and POP receives: their first round,
when it asks one broker group.

A shared-out request (:mod:`app.proxy.fanout`) asks, in its first round, every group its
budget shares give something; once one group holds a topic's messages and the others came back
short, that is one group — the others are asked only by a probe every so often. Such a round
goes the lean way: its shares are planned without keeping anything (a round with a probe, or
with more than one group, goes the endpoint's way as it came), the one group is asked on an
idle keep-alive connection, and its answer, relabelled and recorded in the shares as the
endpoint records it, is the client's answer when nothing more is to be asked: it holds
messages, or it is a refusal, or it is empty and there is neither another group to ask nor a
long-poll to make.

Anything else goes on the endpoint's way with the round (:class:`~app.proxy.fanout.FirstRound`):
the groups left, the long-poll race, the commit of a race's winner — one implementation of
them. A group pull that got no answer asks the group's other readers first (its slaves, as
the endpoint's first round would have); with none (auto_commit: its master only), as a POP
receive, it does not ask that group again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import orjson
from starlette.requests import Request
from starlette.responses import Response

from app.proxy.bodies import json_body
from app.proxy.consume import group_pull, group_pull_path, pull_query, share_query
from app.proxy.context import forwarder
from app.proxy.fanout import BudgetShares, FirstRound, Shared, Unreachable, rotated, turned
from app.proxy.forward import (
    BrokerAnswer,
    BrokerNoAnswerError,
    PassedResponse,
    ProxyError,
    broker_answer,
    forwarded,
    long_poll_timeout,
)
from app.proxy.lean import (
    PLANNING_ERRORS,
    Exchange,
    connection_to,
    get_head,
    request_id_for,
    state_of,
)
from app.proxy.pop import RECEIVE_DEFAULT, pop_receive, receive_path
from app.proxy.relabel import Relabelled, merged_pull, merged_receive, relabel_pull, relabel_receive
from app.proxy.upstream import UpstreamAnswer
from services.cluster import (
    BrokerMember,
    NoMasterError,
    TopicRoute,
    master_of,
    readers,
    topic_route,
)

if TYPE_CHECKING:
    from app.proxy.protocol import HotBody, ProxyHttpProtocol


def lean_group_pull(protocol: ProxyHttpProtocol, held: HotBody, match: re.Match[str]) -> bool:
    """Start a group pull's first round on the lean lane; False (nothing kept) for the
    endpoint's way."""
    scope: Any = held.cycle.scope
    group, topic = match["group"], match["topic"]
    state = state_of(protocol)
    view = state.registry.view
    try:
        route = topic_route(view, topic)
        budget, wait_ms, auto_commit, as_given = pull_query(scope)
        if budget < 1:
            return False  # the broker says why, the endpoint's way (no shares of it)
        round_ = _one_group_round(state.budget_shares, ("pull", group, topic), route, budget)
        if round_ is None:
            return False
        name = round_.name
        members = [master_of(view, name)] if auto_commit else readers(view, name)
    except PLANNING_ERRORS:
        return False
    if not members:
        return False
    share = round_.given[name]
    query, params = share_query(scope, as_given, budget, wait_ms, share, 0, True)
    if params is not None:
        query = urlencode(params).encode()
    member = members[0]
    line, connection = connection_to(state, member, "GET", group_pull_path(group, topic))
    if connection is None:
        return False
    request_id = request_id_for(scope)
    head = get_head(line, query, scope["headers"], request_id)
    exchange = _PullRound(protocol, held, connection, member, request_id)
    exchange.round, exchange.shares, exchange.route = round_, state.budget_shares, route
    exchange.group, exchange.wait_ms = group, wait_ms
    exchange.members, exchange.query = members, query
    return _started(exchange.start((head,), long_poll_timeout(0)))


def lean_receive(protocol: ProxyHttpProtocol, held: HotBody, match: re.Match[str]) -> bool:
    """Start a POP receive's first round on the lean lane; False (nothing kept) for the
    endpoint's way."""
    scope: Any = held.cycle.scope
    group, topic = match["group"], match["topic"]
    state = state_of(protocol)
    view = state.registry.view
    try:
        body = json_body(held.whole())
        route = topic_route(view, topic)
        budget = body.get("max_messages", RECEIVE_DEFAULT)
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
            return False  # the broker says why, the endpoint's way
        round_ = _one_group_round(state.budget_shares, ("pop", group, topic), route, budget)
        if round_ is None:
            return False
        member = master_of(view, round_.name)
        # Made before a connection is taken: a connection taken is given back only by the
        # exchange (orjson writes fewer levels than it reads: the endpoint's way fails on it).
        content = orjson.dumps({**body, "max_messages": round_.given[round_.name], "wait_ms": 0})
    except (*PLANNING_ERRORS, orjson.JSONEncodeError):
        return False
    line, connection = connection_to(state, member, "POST", receive_path(group, topic))
    if connection is None:
        return False
    request_id = request_id_for(scope)
    head = [*line]
    forwarded(head, scope["headers"], request_id, True)
    head.append(b"content-length: %d\r\n\r\n" % len(content))
    exchange = _ReceiveRound(protocol, held, connection, member, request_id)
    exchange.round, exchange.shares, exchange.route = round_, state.budget_shares, route
    exchange.group, exchange.wait_ms = group, body.get("wait_ms", 0)
    return _started(exchange.start((b"".join(head), content), long_poll_timeout(0)))


def _started(taken: bool) -> bool:
    """The round's order is the rotation's once it is asked (not asked: its endpoint's way
    rotates)."""
    if taken:
        turned()
    return taken


class _Round:
    """A first round that asks one group: the groups in order, their shares, the one asked."""

    __slots__ = ("given", "key", "name", "order")

    def __init__(
        self, key: tuple[str, ...], order: list[str], given: dict[str, int], name: str
    ) -> None:
        self.key, self.order, self.given, self.name = key, order, given, name

    def left(self) -> bool:
        """Whether the endpoint's way would ask other groups when this one has nothing."""
        return any(share == 0 for share in self.given.values())


def _one_group_round(
    shares: BudgetShares, key: tuple[str, ...], route: TopicRoute, budget: int
) -> _Round | None:
    """The first round's shares when they ask one group and probe none, else None (nothing
    kept: the endpoint's way shares out as it would have)."""
    order = rotated(route.groups(), turn=False)
    given, probing = shares.plan(key, order, budget)
    asked = [name for name, share in given.items() if share > 0]
    if probing or len(asked) != 1:
        return None
    return _Round(key, order, given, asked[0])


class _FanRound(Exchange):
    """The one group's answer to a first round: recorded, then answered or handed on."""

    round: _Round
    shares: BudgetShares
    route: TopicRoute
    group: str
    wait_ms: Any
    relabel: Callable[[BrokerAnswer, TopicRoute, str, str], Relabelled]

    def read(self, name: str, answer: BrokerAnswer) -> Relabelled:
        return self.relabel(answer, self.route, name, self.group)

    def answered(self, answer: UpstreamAnswer) -> None:
        step = self.settled(broker_answer(answer))
        if isinstance(step, FirstRound):
            self.go_on(step)
        else:
            self.reply(step)

    def settled(self, outcome: BrokerAnswer | Unreachable) -> Response | FirstRound:
        """The group's answer (or the error it met) recorded in the shares as the endpoint's
        way records it; the client's answer when nothing more is to be asked, else the round
        for the endpoint's way to go on with."""
        round_ = self.round
        name = round_.name
        if isinstance(outcome, BrokerAnswer) and outcome.ok:  # the usual answer, straight on
            found = self.read(name, outcome)
            self.shares.record(round_.key, {name: round_.given[name]}, {name: found.count})
            if found.count or not (round_.left() or self._long_polls()):
                return PassedResponse(self.merged([found]), media_type="application/json")
            result = Shared(self.read, [found])
            return FirstRound(round_.order, round_.given, result)
        self.shares.record(round_.key, {name: round_.given[name]}, {})
        if isinstance(outcome, BrokerAnswer):  # refused: what the endpoint's way answers
            return outcome.response()
        result = Shared(self.read)
        result.error = outcome
        return FirstRound(round_.order, round_.given, result)

    def _long_polls(self) -> bool:
        return isinstance(self.wait_ms, int) and self.wait_ms > 0

    def merged(self, answers: list[Relabelled]) -> bytes:
        raise NotImplementedError

    def go_on(self, first: FirstRound | None) -> None:
        raise NotImplementedError


class _PullRound(_FanRound):
    relabel = staticmethod(relabel_pull)
    members: list[BrokerMember]
    query: bytes

    def merged(self, answers: list[Relabelled]) -> bytes:
        return merged_pull(self.group, self.route, answers)

    def not_answered(self, error: BrokerNoAnswerError) -> None:
        rest = self.members[1:]
        if not rest:  # none left to ask (auto_commit: the master): the round's error
            step = self.settled(error)
            assert isinstance(step, FirstRound)
            self.go_on(step)
            return
        lane, group, topic = self.protocol.lane, self.group, self.route.topic
        assert lane is not None
        path, query = group_pull_path(group, topic), self.query

        async def next_readers(request: Request) -> Response:
            """The group's other readers in turn, as the endpoint's first round asks them."""
            try:
                _, answer = await forwarder(request).call_any(
                    rest, "GET", path, query=query, request=request, timeout_s=long_poll_timeout(0)
                )
                step = self.settled(answer)
            except (ProxyError, NoMasterError) as exc:
                step = self.settled(exc)
            if isinstance(step, FirstRound):
                return await group_pull(group, topic, request, step)
            return step

        self.hand_over(lambda request: lane.settle(request, next_readers(request)))

    def go_on(self, first: FirstRound | None) -> None:
        lane, group, topic = self.protocol.lane, self.group, self.route.topic
        assert lane is not None
        self.hand_over(
            lambda request: lane.settle(request, group_pull(group, topic, request, first))
        )


class _ReceiveRound(_FanRound):
    relabel = staticmethod(relabel_receive)

    def merged(self, answers: list[Relabelled]) -> bytes:
        chosen = [answer for answer in answers if answer.count]
        return merged_receive(self.group, self.route.topic, chosen)

    def not_answered(self, error: BrokerNoAnswerError) -> None:
        step = self.settled(error)  # its group is not asked again: it may have popped
        assert isinstance(step, FirstRound)
        self.go_on(step)

    def go_on(self, first: FirstRound | None) -> None:
        lane, group, topic = self.protocol.lane, self.group, self.route.topic
        assert lane is not None
        self.hand_over(
            lambda request: lane.settle(request, pop_receive(group, topic, request, first))
        )

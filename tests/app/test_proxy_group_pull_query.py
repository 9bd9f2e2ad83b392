"""A group pull through the proxy asks a broker group for what the client asked: the query a
broker reads (as Starlette parses it: the last value of a number, every value of the rest) is
the one the proxy built from the client's parameters, whether the client's query string is
passed on as it came (the usual pull) or built again (numbers written otherwise, named twice,
a share of the budget)."""

from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl, urlencode

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.datastructures import QueryParams
from starlette.requests import Request

from app.errors import ApiError
from app.proxy.consume import pull_group
from app.proxy.context import DEFAULT_MAX_MESSAGES, int_param, params_without, query_items_of
from app.proxy.fanout import BudgetShares
from app.proxy.forward import Forwarder
from app.proxy.upstream import UpstreamAnswer
from services.cluster import BrokerMember, ClusterView, GroupRoute, QueueRoute, TopicRoute

TOPIC = "Asked"
MASTER = BrokerMember("a", "g1", "http://127.0.0.1:8081", "127.0.0.1:1", "master")
VIEW = ClusterView(
    "c1",
    1,
    {"g1": GroupRoute("g1", 1, MASTER)},
    {TOPIC: TopicRoute(TOPIC, tuple(QueueRoute(q, "g1", q) for q in range(4)))},
)
NUMBERS = ("max_messages", "wait_ms")
BROKER_DEFAULTS = {"max_messages": "32", "wait_ms": "0"}


class _Recorder:
    """A broker group that finds nothing and keeps the query strings it was sent."""

    def __init__(self) -> None:
        self.queries: list[bytes] = []

    async def request(
        self, origin: object, head: bytes, body: object, timeout_s: float
    ) -> UpstreamAnswer:
        target = head[head.index(b" ") + 1 : head.index(b" HTTP/1.1\r\n")]
        self.queries.append(target.partition(b"?")[2])
        empty = {"group": "G", "topic": TOPIC, "messages": [], "queues": []}
        return UpstreamAnswer(200, [(b"content-type", b"application/json")], orjson.dumps(empty))


def request_for(query: bytes, recorder: _Recorder) -> Request:
    state = SimpleNamespace(
        registry=SimpleNamespace(view=VIEW),
        forwarder=Forwarder(recorder),  # type: ignore[arg-type]
        budget_shares=BudgetShares(),
    )
    scope = {
        "type": "http",
        "method": "GET",
        "headers": [],
        "query_string": query,
        "app": SimpleNamespace(state=state),
        "state": {},
    }
    return Request(scope)


def as_read(query: bytes) -> dict[str, list[str]]:
    """What a broker reads of a group pull's query: every value of each name, and of the two
    numbers the last one (its default when there is none)."""
    params = QueryParams(query)
    read = {name: params.getlist(name) for name in params}
    for name in NUMBERS:
        read[name] = read[name][-1:] if name in read else [BROKER_DEFAULTS[name]]
    return read


def rebuilt(request: Request, wait_ms: int = 0, commit: bool = True) -> bytes:
    """The query the proxy built for every group pull before: its whole budget, no wait (or,
    for the long-poll that follows an empty answer, the client's wait and no commit)."""
    budget = int_param(request, "max_messages", DEFAULT_MAX_MESSAGES)
    params = params_without(request, *NUMBERS)
    query = [*params, ("max_messages", str(budget)), ("wait_ms", str(wait_ms))]
    if not commit:
        query = [(k, v) for k, v in query if k != "auto_commit"]
    return urlencode(query).encode()


async def asked(query: bytes) -> list[bytes] | None:
    """The query strings the broker group got; None when the proxy answered by itself, as it
    did before: the first number it cannot read, named as before."""
    recorder = _Recorder()
    try:
        await pull_group("G", TOPIC, request_for(query, recorder))
    except ApiError as exc:
        with pytest.raises(ApiError) as before:
            request = request_for(query, _Recorder())
            for name in NUMBERS:
                int_param(request, name, 0)
        assert (exc.code, exc.detail) == (before.value.code, before.value.detail)
        assert recorder.queries == []
        return None
    return recorder.queries


names = st.sampled_from(
    ["max_messages", "wait_ms", "auto_commit", "tags", "max%5Fmessages", "wait%5Fms", "x+y"]
)
values = st.sampled_from(
    ["32", "1", "7", "0", "-1", "032", "+32", " 32", "%33%32", "", "true", "a+b", "%C3%A9", "\xe9"]
)
queries = st.lists(st.tuples(names, values), max_size=5).map(
    lambda items: "&".join(f"{k}={v}" for k, v in items).encode("latin-1")
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(query=queries)
async def test_a_broker_reads_the_query_the_proxy_built(query: bytes) -> None:
    sent = await asked(query)
    if sent is None:  # a number the proxy cannot read: it answers, nothing is forwarded
        return
    request = request_for(query, _Recorder())
    wait_ms = int_param(request, "wait_ms", 0)
    if int_param(request, "max_messages", DEFAULT_MAX_MESSAGES) < 1:  # the broker says why
        assert sent == [sent[0]] and as_read(sent[0]) == as_read(rebuilt(request, wait_ms))
        return
    assert as_read(sent[0]) == as_read(rebuilt(request))
    if len(sent) > 1:  # nothing found: the long-poll, built as before
        assert wait_ms > 0 and sent[1:] == [rebuilt(request, wait_ms, commit=False)]


async def test_the_usual_pull_passes_the_clients_query_on_as_it_came() -> None:
    for query in (
        b"",
        b"max_messages=32",
        b"max_messages=5&auto_commit=true",
        b"tags=A%7C%7CB&wait_ms=0&max_messages=8",
    ):
        assert await asked(query) == [query]
    for query in (b"max_messages=032", b"max_messages=5&max_messages=6", b"wait_ms=00"):
        sent = await asked(query)
        assert sent is not None and sent[0] != query


@settings(max_examples=500, deadline=None)
@given(
    raw=st.lists(
        st.sampled_from(["&", "=", "%", "+", "%20", "%zz", ";", "max_messages", "32", "\u00e9"])
        | st.text(max_size=4),
        max_size=8,
    ).map("".join)
)
def test_query_items_are_parse_qsls(raw: str) -> None:
    """The query's parameters as parse_qsl gives them (blank values kept), whether they need
    unquoting or not: empty pieces, names without ``=``, several ``=``, non-ASCII text."""
    assert query_items_of(raw) == parse_qsl(raw, keep_blank_values=True)

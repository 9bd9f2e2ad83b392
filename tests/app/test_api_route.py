"""One way to write a route: a route served directly answers as FastAPI's own handling does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic_core import PydanticCustomError
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

from app.main import create_app
from app.routes import (
    cluster,
    dlq,
    docs,
    groups,
    health,
    messages,
    pop,
    redelivery,
    replication,
    topics,
)
from app.routes.api_route import ApiRoute, direct_handler, parse_query, query_of
from app.schemas.common import _DECIMAL, _decimal_only
from app.settings import Settings
from tests.conftest import LiveServer

HOT_OPERATIONS = {"sendMessages", "pullMessages", "pullGroupMessages", "queryMessagesByKey"}

VALUES = st.sampled_from(
    ["", "0", "1", "-1", "+3", "07", "32", "40", "1.0", "1_0", "x", "true", "*", "A||B", "ä"]
)
PULL_NAMES = st.sampled_from(
    [
        "offset",
        "group",
        "commit_offset",
        "max_messages",
        "max_bytes",
        "tags",
        "wait_ms",
        "body_encoding",
        "auto_commit",
        "other",
    ]
)
SEND_NAMES = st.sampled_from(
    ["tags", "keys", "property", "queue_id", "sharding_key", "delay_level", "deliver_after_ms"]
)
QUERIES = st.lists(st.tuples(PULL_NAMES, VALUES | st.just("base64")), max_size=4)
SEND_QUERIES = st.lists(st.tuples(SEND_NAMES, VALUES | st.just("a=b")), max_size=3)
TOPICS = st.sampled_from(["Routed", "Missing", "bad topic", "%RETRY%g"])
QUEUES = st.sampled_from(["0", "1", "-1", "+1", "x", "1024", "99999999999999999999"])
GROUPS = st.sampled_from(["routed", "bad group", "nogroup"])


def app_of(live: LiveServer) -> FastAPI:
    return cast(FastAPI, live.server.config.app)


@pytest.fixture(scope="module")
def routed(live_server: LiveServer) -> Iterator[tuple[LiveServer, httpx.Client]]:
    client = live_server.client()
    assert client.put("/v1/topics/Routed", json={"read_queue_nums": 2}).status_code in (200, 201)
    assert client.put("/v1/groups/routed", json={}).status_code in (200, 201)
    batch = {"messages": [{"body": f"m{i}", "tags": "A" if i % 2 else "B"} for i in range(6)]}
    assert client.post("/v1/topics/Routed/messages", json=batch).status_code == 201
    yield live_server, client


def both_ways(live: LiveServer, client: httpx.Client, method: str, url: str, **kw: Any) -> None:
    """The answer of the direct handler, then of FastAPI's (a dependency override makes
    every route take FastAPI's path): the same status and, but for ids, the same JSON."""
    app = app_of(live)
    direct = client.request(method, url, **kw)
    app.dependency_overrides[_unused] = _unused
    try:
        general = client.request(method, url, **kw)
    finally:
        app.dependency_overrides.clear()
    assert direct.status_code == general.status_code, (url, direct.text, general.text)
    assert comparable(direct) == comparable(general), url


def comparable(response: httpx.Response) -> Any:
    data = response.json()
    if isinstance(data, dict):
        data.pop("request_id", None)
        for message in data.get("messages", []):
            if response.status_code == 201:  # each send stores anew
                message.clear()
    return data


def _unused() -> None:  # pragma: no cover - never called
    pass


ROUTERS = [
    module.router
    for module in (cluster, dlq, docs, groups, health, messages, pop, redelivery, replication)
] + [topics.router]


def test_every_route_is_written_one_way() -> None:
    # redelivery's router includes dlq's, whose routes are counted with dlq
    routes = [route for router in ROUTERS for route in router.routes if getattr(route, "path", "")]
    assert routes and all(isinstance(route, ApiRoute) for route in routes)


def test_the_hot_routes_are_served_directly() -> None:
    direct = {
        route.operation_id
        for router in ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute) and direct_handler(route.dependant) is not None
    }
    assert direct >= HOT_OPERATIONS


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(topic=TOPICS, queue=QUEUES, query=QUERIES)
def test_a_pull_answers_alike_both_ways(
    routed: tuple[LiveServer, httpx.Client], topic: str, queue: str, query: list[Any]
) -> None:
    live, client = routed
    url = f"/v1/topics/{quote(topic, safe='')}/queues/{queue}/messages"
    both_ways(live, client, "GET", url, params=query)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(group=GROUPS, topic=TOPICS, query=QUERIES)
def test_a_group_pull_answers_alike_both_ways(
    routed: tuple[LiveServer, httpx.Client], group: str, topic: str, query: list[Any]
) -> None:
    live, client = routed
    query = [(k, v) for k, v in query if k != "auto_commit"]  # a commit changes what follows
    url = f"/v1/groups/{quote(group, safe='')}/topics/{quote(topic, safe='')}/messages"
    both_ways(live, client, "GET", url, params=query)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(topic=TOPICS, query=SEND_QUERIES, json_body=st.booleans())
def test_a_send_answers_alike_both_ways(
    routed: tuple[LiveServer, httpx.Client], topic: str, query: list[Any], json_body: bool
) -> None:
    live, client = routed
    url = f"/v1/topics/{quote(topic, safe='')}/messages"
    if json_body:
        body = {"content": b'{"body": "x"}', "headers": {"content-type": "application/json"}}
    else:
        body = {"content": b"raw", "headers": {"content-type": "text/plain"}}
    both_ways(live, client, "POST", url, params=query, **body)


@pytest.mark.parametrize(
    ("method", "url"),
    [
        ("PUT", "/v1/topics/Routed/messages"),  # the send route's path, another method: 405
        ("DELETE", "/v1/topics/Routed/queues/0/messages"),
        ("GET", "/v1/topics/Routed/queues/0/messages/"),  # a trailing slash
        ("GET", "/v1/topics/Routed/queues/0/message"),  # no such route
        ("GET", "/v1/topics/Routed/queues/1/messages?offset=0&max_messages=2"),
        ("GET", "/v1/topics/Routed/queues/x/messages"),  # 422 from the path's validation
        ("GET", "/v1/topics/Missing/queues/0/messages"),  # 404 from the domain error's handler
        ("GET", "/v1/topics/Routed/messages?key=k"),
    ],
)
def test_the_direct_routes_layer_answers_as_the_router_does(
    routed: tuple[LiveServer, httpx.Client], method: str, url: str
) -> None:
    # A dependency override turns the layer off as well: the router finds every route.
    live, client = routed
    app = app_of(live)
    direct = client.request(method, url)
    app.dependency_overrides[_unused] = _unused
    try:
        general = client.request(method, url)
    finally:
        app.dependency_overrides.clear()
    assert direct.status_code == general.status_code, (url, direct.text, general.text)
    assert direct.headers.get("content-type") == general.headers.get("content-type")
    assert direct.headers.get("allow") == general.headers.get("allow")
    if direct.headers.get("content-type", "").endswith("json"):
        assert comparable(direct) == comparable(general)
    assert direct.headers["x-request-id"]


async def _late(name: str, request: Request) -> Response:
    return PlainTextResponse(f"{name} {request.path_params['name']}")


async def test_a_route_added_after_the_first_request_is_found(tmp_path: Path) -> None:
    app = create_app(Settings(store_dir=tmp_path / "store"))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        assert (await client.get("/v1/late/a")).status_code == 404
        route = ApiRoute("/v1/late/{name}", _late, methods=["GET"])
        assert route.direct_app is not None
        app.router.routes.append(route)
        answer = await client.get("/v1/late/a")
        assert (answer.status_code, answer.text) == (200, "a a")
        assert answer.headers["x-request-id"]


QUERY_BYTES = st.one_of(
    st.lists(
        st.sampled_from([b"&", b"=", b"a", b"offset", b"32", b"%20", b"%", b"+", b"\xe4", b";"]),
        max_size=12,
    ).map(b"".join),
    st.binary(max_size=40),
)


@given(raw=QUERY_BYTES)
def test_a_query_parsed_the_short_way_is_starlettes(raw: bytes) -> None:
    parsed, reference = parse_query(raw), QueryParams(raw)
    assert type(parsed) is QueryParams
    assert parsed.multi_items() == reference.multi_items()
    assert dict(parsed.items()) == dict(reference.items())
    assert list(parsed) == list(reference) and len(parsed) == len(reference)
    assert str(parsed) == str(reference) and parsed == reference


@given(pairs=st.lists(st.tuples(st.sampled_from(["a", "b", "max_bytes", ""]), st.text(max_size=3))))
def test_a_query_made_of_pairs_is_starlettes(pairs: list[tuple[str, str]]) -> None:
    made, reference = query_of(list(pairs)), QueryParams(pairs)
    assert made.multi_items() == reference.multi_items()
    assert dict(made.items()) == dict(reference.items()) and made == reference
    for name in ("a", "b", "max_bytes", ""):
        assert made.getlist(name) == reference.getlist(name)
        assert made.get(name) == reference.get(name)


_DECIMAL_TEXT = st.one_of(
    st.from_regex(r"[+-]?[0-9]+", fullmatch=True),
    st.text("0123456789+-_. \u0660\u00b2\uff11x", max_size=8),
    st.text(max_size=8),
)


@settings(max_examples=500)
@given(_DECIMAL_TEXT)
def test_a_parameter_integer_is_decimal_digits_with_a_sign_as_the_pattern_says(text: str) -> None:
    # the digits-only shortcut gives what the pattern and int() give, and refuses the same
    if _DECIMAL.fullmatch(text) is None:
        with pytest.raises(PydanticCustomError):
            _decimal_only(text)
    else:
        assert _decimal_only(text) == int(text)
        assert type(_decimal_only(text)) is int

"""The busiest operations served straight from their endpoints (``app.routes.direct``): their
arguments are read as FastAPI reads them, their errors answered by the app's handlers.

An app with endpoints of every shape the dispatch reads — path parameters with constraints, a
query model with lists, aliases, booleans and extras, the request, request-only dependencies —
is called in process twice for each request: with the dispatch serving its operations, and
with FastAPI serving them. Status, headers and body must be the same. The real query models
of the broker's pulls and raw sends are among them.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import httpx
import pytest
from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import JSONResponse, Response

from app.errors import install_error_handlers
from app.main import DIRECT_OPERATIONS, create_app
from app.proxy.main import DIRECT_OPERATIONS as PROXY_DIRECT_OPERATIONS
from app.proxy.main import create_proxy_app
from app.routes.direct import DirectDispatch, EndpointArguments, query_pairs
from app.routes.params import GroupPath, QueueIdPath, TopicPath
from app.routes.table import RouteTable
from app.schemas import GroupPullQuery, PullQuery, RawSendQuery
from app.settings import Settings
from services.errors import TopicNotFoundError


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int = Field(default=10, ge=1, le=100)
    tags: list[str] = []
    flag: bool = False
    named: str | None = Field(default=None, alias="the-name")


async def caller(request: Request) -> str:
    return request.headers.get("x-caller", "nobody")


def _answer(**values: Any) -> Response:
    out = {
        k: v.model_dump(by_alias=True) if isinstance(v, BaseModel) else v for k, v in values.items()
    }
    return JSONResponse(out)


SERVED: list[str] = []
"""The paths the dispatch served itself (the other app's go to FastAPI)."""


class CountingDispatch(DirectDispatch):
    async def serve(self, route: Any, arguments: Any, request: Request, send: Any) -> None:
        SERVED.append(request.url.path)
        await super().serve(route, arguments, request, send)


def make_app(direct: bool) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.get("/pull/{topic}/{queue_id}", operation_id="pull")
    async def pull(
        topic: TopicPath, queue_id: QueueIdPath, query: Annotated[PullQuery, Query()]
    ) -> Response:
        return _answer(topic=topic, queue_id=queue_id, query=query)

    @app.get("/group/{group}/{topic}", operation_id="group")
    async def group(
        group: GroupPath, topic: str, query: Annotated[GroupPullQuery, Query()]
    ) -> Response:
        return _answer(group=group, topic=topic, query=query)

    @app.post("/raw/{topic}", operation_id="raw")
    async def raw(
        topic: str,
        query: Annotated[RawSendQuery, Query()],
        request: Request,
        who: Annotated[str, Depends(caller)],
    ) -> Response:
        return _answer(topic=topic, query=query, body=(await request.body()).decode(), who=who)

    @app.get("/strict/{n}", operation_id="strict")
    async def strict(
        n: Annotated[int, Path(ge=0, lt=5)], query: Annotated[Strict, Query()]
    ) -> Response:
        return _answer(n=n, query=query)

    @app.get("/fails/{how}", operation_id="fails")
    async def fails(how: str) -> Response:
        if how == "http":
            raise HTTPException(409, "taken")
        if how == "domain":
            raise TopicNotFoundError("no such topic")
        raise RuntimeError("unexpected")

    if direct:
        table = RouteTable(app.router.routes)
        operations = {"pull", "group", "raw", "strict", "fails"}
        app.add_middleware(CountingDispatch, fastapi=app, table=table, operations=operations)
    return app


DIRECT, FASTAPIS = make_app(True), make_app(False)


def answers(method: str, url: str, **kwargs: Any) -> tuple[Any, Any]:
    async def both() -> tuple[Any, Any]:
        served = len(SERVED)
        found = []
        for app in (DIRECT, FASTAPIS):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                answer = await client.request(method, url, **kwargs)
                found.append(
                    (answer.status_code, answer.headers.get("content-type"), answer.json())
                )
        assert len(SERVED) == served + 1, "the dispatch did not serve the direct app's request"
        return found[0], found[1]

    return asyncio.run(both())


VALUES = st.sampled_from(["1", "0", "-1", "32", "5.0", "1e3", "x", "", "true", "yes", "2" * 30])
NAMES = st.sampled_from(
    ["max_messages", "wait_ms", "offset", "group", "commit_offset", "tags", "max_bytes",
     "body_encoding", "auto_commit", "limit", "flag", "the-name", "named", "property", "keys",
     "queue_id", "extra"]
)  # fmt: skip
QUERIES = st.lists(st.tuples(NAMES, VALUES | st.sampled_from(["a||b", "base64", "a=b"])))


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["/pull/T/{q}", "/group/G/T", "/strict/{q}", "/pull/bad%20topic/{q}"]),
    st.sampled_from(["0", "3", "7", "1023", "1024", "x", "-1"]),
    QUERIES,
)
def test_a_query_is_read_as_fastapi_reads_it(path: str, queue: str, query: Any) -> None:
    direct, fastapi = answers("GET", path.format(q=queue), params=query)
    assert direct == fastapi


@settings(max_examples=60, deadline=None)
@given(QUERIES, st.sampled_from([{}, {"x-caller": "me"}]))
def test_a_raw_send_reads_its_query_request_and_dependency_as_fastapi(
    query: Any, headers: dict[str, str]
) -> None:
    direct, fastapi = answers("POST", "/raw/T", params=query, content=b"body", headers=headers)
    assert direct == fastapi


@pytest.mark.parametrize("how", ["http", "domain"])
def test_errors_are_answered_by_the_apps_handlers(how: str) -> None:
    direct, fastapi = answers("GET", f"/fails/{how}")
    assert direct == fastapi and direct[0] in (404, 409)


def test_an_error_without_a_handler_is_raised() -> None:
    async def call() -> None:
        transport = httpx.ASGITransport(app=DIRECT, raise_app_exceptions=True)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            await client.get("/fails/other")

    with pytest.raises(RuntimeError, match="unexpected"):
        asyncio.run(call())


def test_a_dependency_override_is_honoured() -> None:
    DIRECT.dependency_overrides[caller] = lambda request: "overridden"
    try:
        direct, _ = answers("POST", "/raw/T", content=b"x")
    finally:
        DIRECT.dependency_overrides.clear()
    assert direct[2]["who"] == "overridden"


def test_a_signature_with_anything_else_is_refused() -> None:
    async def with_body(topic: str, body: RawSendQuery) -> Response:
        raise AssertionError

    async def with_header(topic: str, x: Annotated[str | None, Query()] = None) -> Response:
        raise AssertionError

    with pytest.raises(TypeError, match="body"):
        EndpointArguments(with_body, ["topic"])
    with pytest.raises(TypeError, match="x"):
        EndpointArguments(with_header, ["topic"])


def _broker() -> FastAPI:
    return create_app(Settings.model_construct())


def _proxy() -> FastAPI:
    return create_proxy_app("c", ["http://127.0.0.1:1"])


@pytest.mark.parametrize(
    ("app", "operations"),
    [
        pytest.param(_broker, DIRECT_OPERATIONS, id="broker"),
        pytest.param(_proxy, PROXY_DIRECT_OPERATIONS, id="proxy"),
    ],
)
def test_every_operation_served_directly_has_a_signature_it_reads(
    app: Any, operations: frozenset[str]
) -> None:
    built = app()
    routes = {getattr(r, "operation_id", None): r for r in built.router.routes}
    assert operations <= routes.keys()
    for operation in operations:
        route = routes[operation]
        EndpointArguments(route.endpoint, route.param_convertors)


@given(st.text(alphabet="ab=&%2F+;\u00e9 0", max_size=24))
def test_query_pairs_are_parse_qsls(text: str) -> None:
    from urllib.parse import parse_qsl

    raw = text.encode("utf-8")
    assert query_pairs(raw) == parse_qsl(raw.decode("latin-1"), keep_blank_values=True)

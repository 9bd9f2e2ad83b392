"""The busiest operations served straight from their endpoints (``app.routes.direct``): their
arguments are read as FastAPI reads them, their errors answered by the app's handlers —
whether the ASGI middleware serves them or the server's wire face (``app.routes.wire``).

An app with endpoints of every shape the dispatch reads — path parameters with constraints, a
query model with lists, aliases, booleans and extras, the request, request-only dependencies —
is called three times for each request: in process with the dispatch serving its operations,
through a real server on 127.0.0.1 whose wire face serves them, and in process with FastAPI
serving them. Status, content type and body must be the same. The real query models of the
broker's pulls and raw sends are among them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
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
from app.middleware import HttpShellMiddleware
from app.proxy.main import DIRECT_OPERATIONS as PROXY_DIRECT_OPERATIONS
from app.proxy.main import create_proxy_app
from app.routes.direct import DirectDispatch, DirectOperations, EndpointArguments, query_pairs
from app.routes.params import GroupPath, QueueIdPath, TopicPath
from app.routes.table import RouteTable
from app.routes.wire import EndpointFace
from app.schemas import GroupPullQuery, PullQuery, RawSendQuery
from app.settings import Settings
from services.errors import TopicNotFoundError
from tests.app.server.support import serving


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
"""The paths the dispatch and the face served themselves (FastAPI's app's go to FastAPI)."""
OPERATIONS = {"pull", "group", "raw", "strict", "fails"}
LIMIT = 1 << 20


class CountingOperations(DirectOperations):
    async def answer(self, arguments: EndpointArguments, request: Request) -> Response:
        SERVED.append(request.url.path)
        return await super().answer(arguments, request)


class CountingDispatch(DirectDispatch):
    def __init__(self, app: Any, fastapi: FastAPI, table: RouteTable, operations: Any) -> None:
        super().__init__(app, fastapi, table, operations)
        self.direct = CountingOperations(fastapi, table, operations)


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
        app.add_middleware(CountingDispatch, fastapi=app, table=table, operations=OPERATIONS)
    app.add_middleware(HttpShellMiddleware, max_request_bytes=LIMIT)
    return app


DIRECT, FACED, FASTAPIS = make_app(True), make_app(False), make_app(False)
FACE: list[httpx.Client] = []
"""A client of the server whose wire face serves FACED's operations (while the module runs)."""


@pytest.fixture(scope="module", autouse=True)
def face_server() -> Iterator[None]:
    direct = CountingOperations(FACED, RouteTable(FACED.router.routes), OPERATIONS)
    with (
        serving(FACED, face=EndpointFace(direct, LIMIT)) as running,
        httpx.Client(base_url=f"http://127.0.0.1:{running.port}") as client,
    ):
        FACE.append(client)
        yield
        FACE.clear()


def _seen(answer: httpx.Response) -> tuple[int, str | None, Any]:
    return answer.status_code, answer.headers.get("content-type"), answer.json()


def answers(method: str, url: str, **kwargs: Any) -> tuple[Any, Any, Any]:
    """The answers of the dispatch, the face and FastAPI (to a request with an id)."""
    kwargs["headers"] = {**kwargs.get("headers", {}), "x-request-id": "compared"}

    async def in_process(app: FastAPI) -> Any:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return _seen(await client.request(method, url, **kwargs))

    served = len(SERVED)
    direct = asyncio.run(in_process(DIRECT))
    faced = _seen(FACE[0].request(method, url, **kwargs))
    fastapi = asyncio.run(in_process(FASTAPIS))
    assert len(SERVED) == served + 2, "the dispatch or the face did not serve the request"
    return direct, faced, fastapi


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
    direct, faced, fastapi = answers("GET", path.format(q=queue), params=query)
    assert direct == faced == fastapi


@settings(max_examples=60, deadline=None)
@given(QUERIES, st.sampled_from([{}, {"x-caller": "me"}]))
def test_a_raw_send_reads_its_query_request_and_dependency_as_fastapi(
    query: Any, headers: dict[str, str]
) -> None:
    direct, faced, fastapi = answers(
        "POST", "/raw/T", params=query, content=b"body", headers=headers
    )
    assert direct == faced == fastapi


@pytest.mark.parametrize("how", ["http", "domain"])
def test_errors_are_answered_by_the_apps_handlers(how: str) -> None:
    direct, faced, fastapi = answers("GET", f"/fails/{how}")
    assert direct == faced == fastapi and direct[0] in (404, 409)


def test_an_error_without_a_handler_is_the_shells_500() -> None:
    direct, faced, fastapi = answers("GET", "/fails/other")
    assert direct == faced == fastapi
    assert direct[0] == 500 and direct[2]["code"] == "INTERNAL_ERROR"


def test_a_dependency_override_is_honoured() -> None:
    for app in (DIRECT, FACED):
        app.dependency_overrides[caller] = lambda request: "overridden"
    try:
        direct, faced, _ = answers("POST", "/raw/T", content=b"x")
    finally:
        DIRECT.dependency_overrides.clear()
        FACED.dependency_overrides.clear()
    assert direct[2]["who"] == faced[2]["who"] == "overridden"


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

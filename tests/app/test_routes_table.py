"""Which route a request reaches (``app.routes.table``): the route the router picks — its first
full match — with its operationId and path parameters, for every route of the broker's app."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import APIRouter, FastAPI
from starlette.responses import Response
from starlette.routing import Match, Mount, Route

from app.main import create_app
from app.routes.table import RouteTable, add_routes, route_key
from app.settings import Settings


def scope(method: str, path: str) -> dict[str, Any]:
    return {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}


async def nothing() -> Response:
    return Response()


def small_app() -> FastAPI:
    app = FastAPI()
    router = APIRouter()
    router.add_api_route("/v1/topics/{topic}", nothing, methods=["GET"], operation_id="getTopic")
    router.add_api_route("/v1/topics/{topic}", nothing, methods=["PUT"], operation_id="putTopic")
    router.add_api_route("/v1/topics/special", nothing, methods=["GET"], operation_id="special")
    add_routes(app, router)
    return app


def test_the_first_full_match_wins_with_its_path_parameters() -> None:
    app = small_app()
    table = RouteTable(app.router.routes)
    found = table.find(scope("GET", "/v1/topics/special"))
    assert found is not None and found.key == "getTopic"  # declared first: the router's pick
    assert found.path_params == {"topic": "special"}
    put = table.find(scope("PUT", "/v1/topics/T"))
    assert put is not None and put.key == "putTopic"


def test_a_path_without_a_route_for_its_method_is_none() -> None:
    table = RouteTable(small_app().router.routes)
    assert table.find(scope("DELETE", "/v1/topics/T")) is None
    assert table.find(scope("GET", "/v2/nothing")) is None


def test_a_route_added_later_is_found() -> None:
    app = small_app()
    table = RouteTable(app.router.routes)
    assert table.find(scope("GET", "/late")) is None
    app.router.routes.append(Route("/late", nothing, name="late"))
    found = table.find(scope("GET", "/late"))
    assert found is not None and found.key == "late"


def test_what_a_request_reaches_is_what_the_router_picks_for_every_route_of_the_broker() -> None:
    app = create_app(Settings.model_construct())
    table = RouteTable(app.router.routes)
    checked = 0
    for route in app.router.routes:
        if not isinstance(route, Route | Mount):
            continue
        path = getattr(route, "path", "").replace("{topic}", "T").replace("{group}", "G")
        path = path.replace("{queue_id}", "1").replace("{msg_id}", "0" * 32)
        path = path.replace("{path:path}", "x.css")
        for method in sorted(getattr(route, "methods", None) or {"GET"}):
            request = scope(method, "/".join(p if "{" not in p else "x" for p in path.split("/")))
            expected = next(
                (r for r in app.router.routes if r.matches(request)[0] is Match.FULL), None
            )
            found = table.find(request)
            assert (found.route if found else None) is expected, (method, request["path"])
            checked += 1
    assert checked > 40


@pytest.mark.parametrize(
    ("route", "key"),
    [
        (Route("/a", nothing, name="named"), "named"),
        (Mount("/static", routes=[], name="static"), "static"),
    ],
)
def test_a_route_is_known_by_its_name_and_an_api_route_by_its_operation_id(
    route: Any, key: str
) -> None:
    assert route_key(route) == key
    app = small_app()
    assert [route_key(r) for r in app.router.routes][-3:] == ["getTopic", "putTopic", "special"]

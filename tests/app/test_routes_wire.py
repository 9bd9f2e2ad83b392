"""The wire face keeps the HTTP shell's rules for the requests it takes (``app.routes.wire``).

One app, served by a real server on 127.0.0.1, has the same endpoint twice: under ``/d/`` as
an operation the wire face serves, under ``/a/`` as one the app serves through ASGI inside
:class:`~app.middleware.HttpShellMiddleware`. Each request goes to both; the answers must be
the same, down to the problem's code, the request id and whether the connection closes.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from fastapi import FastAPI, Request
from starlette.responses import Response

from app.deps import read_body
from app.errors import install_error_handlers
from app.middleware import HttpShellMiddleware
from app.responses import OrjsonResponse
from app.routes.direct import DirectOperations
from app.routes.table import RouteTable
from app.routes.wire import EndpointFace
from app.server import ServerLimits
from tests.app.server.support import FAST, Answer, Running, chunked, request_bytes, serving

LIMIT = 64
LIMITS: ServerLimits = dataclasses.replace(FAST, body_timeout_s=0.3)


def make_app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    async def echo(name: str, request: Request) -> Response:
        body = await read_body(request)
        state = request.scope["state"]
        return OrjsonResponse({"name": name, "body": body.decode(), "id": state["request_id"]})

    app.post("/d/{name}", operation_id="direct")(echo)
    app.post("/a/{name}", operation_id="asgi")(echo)

    @app.get("/d/{name}", operation_id="directGet")
    async def named(name: str) -> Response:
        return OrjsonResponse({"name": name})

    app.add_middleware(HttpShellMiddleware, max_request_bytes=LIMIT)
    return app


@pytest.fixture(scope="module")
def running() -> Iterator[Running]:
    app = make_app()
    direct = DirectOperations(app, RouteTable(app.router.routes), {"direct", "directGet"})
    with serving(app, LIMITS, face=EndpointFace(direct, LIMIT)) as served:
        yield served


def both(running: Running, raw: bytes) -> tuple[Answer, Answer]:
    """The answers of the face (``raw`` to ``/d/``) and of the app (to ``/a/``), each on a
    connection of its own; ``raw`` is a request to ``/X/...``."""
    found = []
    for prefix in (b"/d/", b"/a/"):
        client = running.connect()
        client.send(raw.replace(b" /X/", b" " + prefix, 1))
        found.append(client.read_answer())
    return found[0], found[1]


def same(face: Answer, app: Answer, ids_equal: bool = True) -> dict[str, Any]:
    """Assert the two answers are the same; the face's answer's JSON body."""
    assert face.status == app.status
    assert face.header("content-type") == app.header("content-type")
    assert face.header("connection") == app.header("connection")
    face_id, app_id = face.header("x-request-id"), app.header("x-request-id")
    assert face_id and app_id
    if ids_equal:
        assert face_id == app_id
    face_body, app_body = orjson.loads(face.body), orjson.loads(app.body)
    for body in (face_body, app_body):
        body.pop("instance", None)  # names the path, which differs
        if not ids_equal:
            body.pop("id", None)
            body.pop("request_id", None)
    assert face_body == app_body
    return dict(orjson.loads(face.body))


def test_a_request_id_the_client_gives_is_kept(running: Running) -> None:
    raw = request_bytes("POST", "/X/n", [("X-Request-Id", "client-1")], b"hi")
    body = same(*both(running, raw))
    assert body == {"name": "n", "body": "hi", "id": "client-1"}


def test_a_request_id_that_is_no_token_is_replaced_by_a_new_one(running: Running) -> None:
    face, app = both(running, request_bytes("POST", "/X/n", [("X-Request-Id", "a b")], b""))
    same(face, app, ids_equal=False)
    assert re.fullmatch(r"[0-9a-f]{32}", face.header("x-request-id") or "")
    assert orjson_of(face)["id"] == face.header("x-request-id")


def test_a_body_declared_over_the_cap_is_refused_before_it_is_read(running: Running) -> None:
    declared = [("Content-Length", str(LIMIT + 1)), ("X-Request-Id", "big")]
    raw = request_bytes("POST", "/X/n", declared)  # no body sent
    face, app = both(running, raw)
    body = same(face, app)
    assert face.status == 413 and body["code"] == "REQUEST_TOO_LARGE"
    assert face.header("connection") == "close"


def test_a_chunked_body_over_the_cap_is_refused(running: Running) -> None:
    head = request_bytes("POST", "/X/n", [("Transfer-Encoding", "chunked"), ("X-Request-Id", "c")])
    face, app = both(running, head + chunked(b"x" * 40, b"y" * 40))
    body = same(face, app)
    assert face.status == 413 and body["code"] == "REQUEST_TOO_LARGE"


def test_a_body_that_stops_arriving_is_a_408(running: Running) -> None:
    raw = request_bytes("POST", "/X/n", [("Content-Length", "10"), ("X-Request-Id", "t")]) + b"abc"
    face, app = both(running, raw)
    body = same(face, app)
    assert face.status == 408 and body["code"] == "REQUEST_TIMEOUT"
    assert face.header("connection") == "close"


def test_an_encoded_slash_stays_in_its_path_segment(running: Running) -> None:
    body = same(*both(running, request_bytes("POST", "/X/a%2Fb", [("X-Request-Id", "s")])))
    assert body["name"] == "a\u2215b"


def test_a_get_with_a_declared_body_is_answered_without_reading_it(running: Running) -> None:
    client = running.connect()
    client.send(request_bytes("GET", "/d/g", [("Content-Length", "5")]))  # the body never comes
    got = client.read_answer()
    assert got.status == 200 and orjson_of(got)["name"] == "g"


def orjson_of(answer: Answer) -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(answer.body)
    return loaded

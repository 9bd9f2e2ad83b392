"""SpoolmqApp hands an HTTP request straight to the HTTP shell: the answers — successes,
refusals, 404s, 413s, a 500 before the answer started — are FastAPI's own, byte for byte, and
an exception after the answer started still propagates; apps the shortcut does not fit go
FastAPI's way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
from starlette.middleware.gzip import GZipMiddleware
from starlette.responses import Response, StreamingResponse

from app.application import SpoolmqApp
from app.main import create_app
from app.middleware import HttpShellMiddleware
from app.routes.api_route import add_routes, api_router
from app.settings import Settings

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]

_failing = api_router()


@_failing.get("/v1/test/fails", include_in_schema=False)
async def _fails() -> Response:
    raise RuntimeError("a bug")


@_failing.get("/v1/test/fails-late", include_in_schema=False)
async def _fails_late() -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"partial"
        raise RuntimeError("a bug after the answer started")

    return StreamingResponse(chunks())


async def _call(app: Any, method: str, path: str, body: bytes = b"", **headers: str) -> Answer:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", b"req-1"),
            *((k.encode(), v.encode()) for k, v in headers.items()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8080),
        "state": {},
    }
    pending = [{"type": "http.request", "body": body, "more_body": False}]
    answer: list[Any] = [0, [], b""]

    async def receive() -> dict[str, Any]:
        if pending:
            return pending.pop()
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer[0], answer[1] = message["status"], list(message["headers"])
        else:
            answer[2] += message.get("body", b"")

    await app(scope, receive, send)
    return answer[0], answer[1], answer[2]


REQUESTS = [
    ("GET", "/healthz", b""),
    ("GET", "/v1/nowhere", b""),
    ("POST", "/v1/topics/T/messages", b'{"body": "hi", "queue_id": 0}'),
    ("POST", "/v1/topics/bad topic/messages", b'{"body": "hi"}'),
    ("POST", "/v1/topics/T/messages", b"{not json"),
    ("GET", "/v1/topics/T/queues/0/messages", b""),
    ("POST", "/v1/topics/T/messages", b"x" * 5_000_000),
    ("GET", "/v1/test/fails", b""),
]


def _without_times(answer: Answer) -> Answer:
    """Send and pull answers carry store times and ids: compare their status and kind."""
    status, headers, body = answer
    if b"store_timestamp" in body or b"born_timestamp" in body:
        return status, [h for h in headers if h[0] != b"content-length"], b"(timed)"
    return answer


def test_answers_are_the_ones_fastapis_way_gives(tmp_path: Path) -> None:
    async def run(root: Path, shortcut: bool) -> list[Answer]:
        app = create_app(Settings(store_dir=root, host="127.0.0.1", port=0, log_level="warning"))
        assert isinstance(app, SpoolmqApp)
        add_routes(app, _failing)
        if not shortcut:
            app._shell_found = True  # FastAPI's way: every layer
        async with app.router.lifespan_context(app):
            for _ in range(600):
                if (await _call(app, "GET", "/readyz"))[0] == 200:
                    break
                await asyncio.sleep(0.05)
            answers = [await _call(app, m, p, b) for m, p, b in REQUESTS]
            assert (app._shell is not None) is shortcut
            with pytest.raises(RuntimeError, match="after the answer started"):
                await _call(app, "GET", "/v1/test/fails-late")
        return answers

    shortcut = asyncio.run(run(tmp_path / "a", True))
    general = asyncio.run(run(tmp_path / "b", False))
    assert [_without_times(a) for a in shortcut] == [_without_times(a) for a in general]
    statuses = [a[0] for a in shortcut]
    assert statuses == [200, 404, 201, 400, 400, 200, 413, 500]
    assert all((b"x-request-id", b"req-1") in a[1] for a in shortcut)


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({"debug": True}, id="debug"),
        pytest.param({"max_body_size": 10}, id="body-limit"),
    ],
)
def test_an_app_the_shortcut_does_not_fit_goes_fastapis_way(settings: dict[str, Any]) -> None:
    app = SpoolmqApp(telemetry={"tracing": False, "metrics": False, "logs": False})
    app.add_middleware(HttpShellMiddleware, max_request_bytes=10)
    assert isinstance(app._find_shell(), HttpShellMiddleware)  # it fits this one
    other = SpoolmqApp(**{"telemetry": {"tracing": False, "metrics": False}, **settings})
    other.add_middleware(HttpShellMiddleware, max_request_bytes=10)
    assert other._find_shell() is None


def test_an_app_with_telemetry_on_goes_fastapis_way(monkeypatch: pytest.MonkeyPatch) -> None:
    app = SpoolmqApp(telemetry={"tracing": True, "metrics": False, "logs": False})
    app.add_middleware(HttpShellMiddleware, max_request_bytes=10)
    monkeypatch.setattr(app._native_telemetry, "enabled", lambda: True)  # a provider is set
    assert app._find_shell() is None


def test_an_app_whose_outer_middleware_is_not_the_shell_goes_fastapis_way() -> None:
    app = SpoolmqApp(telemetry={"tracing": False, "metrics": False, "logs": False})
    app.add_middleware(HttpShellMiddleware, max_request_bytes=10)
    app.add_middleware(GZipMiddleware)
    assert app._find_shell() is None

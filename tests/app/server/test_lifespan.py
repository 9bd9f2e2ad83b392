"""The ASGI lifespan protocol: the app starts before the first request and shuts down after
the last; an app whose start-up fails is not served, one without lifespan support is.
"""

from __future__ import annotations

import asyncio
import logging
import queue
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from app.server.lifespan import Lifespan, LifespanError
from tests.app.server.support import (
    WAIT_S,
    AsgiApp,
    Receive,
    Scope,
    Send,
    answer,
    next_item,
    read_body,
    serving,
    start,
)


def _lifespan_app(
    events: queue.Queue[str], startup: str = "complete", shutdown: str = "complete"
) -> AsgiApp:
    """An app that says what it got, and answers its start-up and shut-down as told."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await read_body(receive)
            events.put(f"{scope['method']} {scope['path']}")
            await answer(send, 200, b"served")
            return
        assert scope["type"] == "lifespan"
        message = await receive()
        events.put(message["type"])
        if startup != "complete":
            await send({"type": "lifespan.startup.failed", "message": "no store"})
            return
        await send({"type": "lifespan.startup.complete"})
        message = await receive()
        events.put(message["type"])
        await send({"type": f"lifespan.shutdown.{shutdown}", "message": "left a mess"})
        events.put("shut down")

    return app


def _drain(events: queue.Queue[str]) -> list[str]:
    got = []
    while not events.empty():
        got.append(events.get())
    return got


def test_start_up_and_shut_down_reach_the_app_in_order() -> None:
    events: queue.Queue[str] = queue.Queue()
    with serving(_lifespan_app(events)) as running:
        assert next_item(events) == "lifespan.startup"  # before the server serves
        client = running.connect()
        client.request("GET", "/first")
        assert client.read_answer().body == b"served"
        assert next_item(events) == "GET /first"
        assert events.empty()  # no shut-down while serving
    assert _drain(events) == ["lifespan.shutdown", "shut down"]


def test_an_app_whose_start_up_fails_is_not_served(caplog: pytest.LogCaptureFixture) -> None:
    events: queue.Queue[str] = queue.Queue()
    with caplog.at_level(logging.ERROR, logger="spoolmq.server"):
        running = start(_lifespan_app(events, startup="failed"))
        running.ended()  # serve returned
    assert not running.server.started
    with pytest.raises(ConnectionRefusedError):
        running.connect()  # the socket never listened
    assert _drain(events) == ["lifespan.startup"]
    assert "the app did not start: no store" in caplog.text


def test_a_starlette_app_whose_start_up_raises_is_not_served() -> None:
    async def open_store() -> None:
        raise OSError("the disk is gone")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await open_store()
        yield

    running = start(Starlette(lifespan=lifespan))
    running.ended()
    assert not running.server.started


@pytest.mark.parametrize("how", ["raises", "returns"])
def test_an_app_without_lifespan_support_is_still_served(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: queue.Queue[str] = queue.Queue()

    async def http_only(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            calls.put(scope["type"])
            if how == "raises":
                raise ValueError(f"unsupported scope {scope['type']}")
            return
        await answer(send, 200, b"served anyway")

    with serving(http_only) as running:
        client = running.connect()
        client.request("GET", "/")
        assert client.read_answer().body == b"served anyway"
    assert _drain(calls) == ["lifespan"]  # asked once, never again (no shut-down)
    assert "did not start" not in caplog.text


def test_an_app_that_raises_in_its_start_up_is_served_without_lifespan(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ASGI: an exception rather than lifespan.startup.failed means no lifespan support."""
    events: queue.Queue[str] = queue.Queue()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await answer(send, 200, b"served")
            return
        events.put((await receive())["type"])
        raise RuntimeError("start-up crashed")

    with caplog.at_level(logging.INFO, logger="spoolmq.server"), serving(app) as running:
        client = running.connect()
        client.request("GET", "/")
        assert client.read_answer().body == b"served"
    assert _drain(events) == ["lifespan.startup"]  # and no shut-down
    failures = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.getMessage() for r in failures] == ["the app's lifespan raised"]


def test_a_failed_shut_down_is_logged_and_the_server_still_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    events: queue.Queue[str] = queue.Queue()
    with caplog.at_level(logging.ERROR, logger="spoolmq.server"):
        with serving(_lifespan_app(events, shutdown="failed")) as running:
            client = running.connect()
            client.request("GET", "/")
            assert client.read_answer().status == 200
        assert _drain(events)[-2:] == ["lifespan.shutdown", "shut down"]
    assert "left a mess" in caplog.text


def test_the_lifespan_state_reaches_every_request_as_a_copy() -> None:
    """What a Starlette lifespan yields is in each request's state; what a request sets
    there is its own."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        yield {"greeting": "hello"}

    async def greet(request: Request) -> PlainTextResponse:
        seen = getattr(request.state, "seen", None)
        request.state.seen = request.url.path
        return PlainTextResponse(f"{request.state.greeting} {seen}")

    app = Starlette(lifespan=lifespan, routes=[Route("/{name}", greet)])
    with serving(app) as running:
        client = running.connect()
        for name in ("a", "b"):
            client.request("GET", f"/{name}")
            assert client.read_answer().body == b"hello None"


async def test_a_failed_start_up_is_an_error_with_the_apps_message() -> None:
    events: queue.Queue[str] = queue.Queue()
    lifespan = Lifespan(_lifespan_app(events, startup="failed"))
    with pytest.raises(LifespanError, match="no store"):
        await lifespan.startup()


async def test_shut_down_after_an_app_without_lifespan_does_nothing() -> None:
    async def returns(scope: Scope, receive: Receive, send: Send) -> None:
        return

    lifespan = Lifespan(returns)
    await lifespan.startup()
    await asyncio.wait_for(lifespan.shutdown(), WAIT_S)
    assert lifespan.task is not None and lifespan.task.done()

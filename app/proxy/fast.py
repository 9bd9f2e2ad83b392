"""The proxy's hot routes, served ahead of FastAPI: send, pull of one queue, group pull, POP
receive.

Through FastAPI a proxied request crossed six middleware layers, the router's matching and the
dependency machinery before its endpoint ran — a third of what the proxy spent on a small
send. :class:`FastLane` matches these four paths itself and calls the same endpoint functions
with the path parameters converted; every other request (and a path that does not convert, such
as a queue id that is not a number) goes on to the FastAPI app. Errors raised here are answered
by the FastAPI app's own exception handlers, so both ways answer alike.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

Endpoint = Callable[..., Awaitable[Response]]


@dataclass(frozen=True, slots=True)
class FastRoute:
    """A method, a path pattern with named groups, and the endpoint they are passed to."""

    method: str
    pattern: re.Pattern[str]
    endpoint: Endpoint
    converters: tuple[tuple[str, Callable[[str], Any]], ...] = ()
    lean: Callable[..., bool] | None = None
    """Starts the request on the protocol's lean lane (:mod:`app.proxy.lean`) once its body is
    complete, or says False for the endpoint's way."""


def fast_route(
    method: str,
    path: str,
    endpoint: Endpoint,
    lean: Callable[..., bool] | None = None,
    **converters: Callable[[str], Any],
) -> FastRoute:
    """``path`` in FastAPI's syntax (``/v1/topics/{topic}/messages``); a converted parameter
    matches digits only."""

    def group(match: re.Match[str]) -> str:
        name = match.group(1)
        # at most 18 digits: int() refuses over 4300 (a 500), and a longer one is no queue
        return f"(?P<{name}>[0-9]{{1,18}})" if name in converters else f"(?P<{name}>[^/]+)"

    pattern = re.compile("^" + re.sub(r"\{(\w+)\}", group, path) + "$")
    return FastRoute(method, pattern, endpoint, tuple(converters.items()), lean)


class FastLane:
    """An ASGI app that serves ``routes`` itself and hands everything else to ``app``."""

    def __init__(self, app: FastAPI, routes: Sequence[FastRoute]) -> None:
        self.app = app
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            found = self.find(scope["method"], scope["path"])
            if found is not None:
                scope["app"] = self.app  # what request.app means in the endpoints
                response = await self.answer(*found, Request(scope, receive))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def find(self, method: str, path: str) -> tuple[FastRoute, re.Match[str]] | None:
        """The hot route ``method`` and ``path`` ask for, with the path's match."""
        for route in self.routes:
            if route.method != method:
                continue
            match = route.pattern.match(path)
            if match is not None:
                return route, match
        return None

    async def answer(self, route: FastRoute, match: re.Match[str], request: Request) -> Response:
        """The endpoint's answer, or the FastAPI app's answer to what it raised."""
        params: dict[str, Any] = match.groupdict()
        try:
            for name, convert in route.converters:
                params[name] = convert(params[name])
            return await route.endpoint(request=request, **params)
        except Exception as exc:
            return await self._handled(request, exc)

    async def settle(self, request: Request, answer: Awaitable[Response]) -> Response:
        """``answer``, or the FastAPI app's answer to what it raised."""
        try:
            return await answer
        except Exception as exc:
            return await self._handled(request, exc)

    async def _handled(self, request: Request, exc: Exception) -> Response:
        """The FastAPI app's handler for ``exc`` (Starlette's MRO lookup); none: re-raised."""
        handlers = self.app.exception_handlers
        for cls in type(exc).__mro__:
            handler = handlers.get(cls)
            if handler is not None:
                answer = handler(request, exc)
                if inspect.isawaitable(answer):
                    answer = await answer
                assert isinstance(answer, Response)
                return answer
        raise exc

"""Which route a request will reach, found the way the router finds it.

The app's routes are flattened once, in the router's order: a FastAPI route keeps its
operationId (or name) as its key, and routers included with ``include_router`` (FastAPI
keeps them as nested "included router" objects) contribute their routes with their full
paths. A plain Starlette route on the path and method of a FastAPI route (a twin put in
front of it) takes that route's key, so the permission table has one entry per operation;
the app's own routes are all FastAPI routes (:mod:`app.routes.api_route`). Matching uses
Starlette's own ``Route.matches()``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Mount, Route
from starlette.types import Scope

_CACHE_SIZE: Final = 4096
_CACHEABLE_PATH: Final = 512  # longer paths are matched every time, never kept


@dataclass(frozen=True, slots=True)
class RouteInfo:
    """One route as the security layer sees it."""

    key: str | None  # operationId, else the route's name
    path: str  # the full path template, e.g. /v1/topics/{topic}
    methods: frozenset[str]  # empty for a mount
    matcher: BaseRoute
    fastapi: bool = False  # a FastAPI route (in the OpenAPI document when it says so)


@dataclass(frozen=True, slots=True)
class Resolved:
    """The route a request reaches: its key and its path parameters."""

    key: str | None
    path_params: dict[str, Any]


async def _never_called(request: Request) -> Response:  # pragma: no cover - matching only
    raise AssertionError("a matcher route is never served")


def flatten_routes(routes: Sequence[BaseRoute]) -> list[RouteInfo]:
    """Every route of the app in matching order, twins keyed like their FastAPI route."""
    infos = list(_leaves(routes))
    api = [i for i in infos if i.fastapi]
    return [info if info.fastapi else _twin_key(info, api) for info in infos]


def _leaves(routes: Sequence[BaseRoute]) -> Iterator[RouteInfo]:
    for route in routes:
        contexts = getattr(route, "effective_route_contexts", None)
        if contexts is not None:  # a router included by FastAPI
            for context in contexts():
                yield _from_context(context)
        elif isinstance(route, APIRoute):
            yield _api_info(route, route.path, route.methods)
        elif isinstance(route, Route):
            yield RouteInfo(route.name, route.path, frozenset(route.methods or ()), route)
        elif isinstance(route, Mount):
            yield RouteInfo(route.name, route.path, frozenset(), route)


def _from_context(context: Any) -> RouteInfo:
    original = context.original_route
    if isinstance(original, APIRoute):
        return _api_info(original, context.path, context.methods or original.methods)
    matcher = context.starlette_route or original
    name = getattr(original, "name", None)
    return RouteInfo(name, getattr(matcher, "path", ""), frozenset(), matcher)


def _api_info(route: APIRoute, path: str, methods: set[str] | None) -> RouteInfo:
    key = route.operation_id or route.name
    methods = set(methods or ())
    matcher = Route(path, _never_called, methods=sorted(methods), name=key)
    return RouteInfo(key, path, frozenset(methods), matcher, fastapi=True)


def _twin_key(info: RouteInfo, api: list[RouteInfo]) -> RouteInfo:
    """A plain route on the same path and method as a FastAPI route takes its key."""
    matcher = info.matcher
    if not isinstance(matcher, Route):
        return info
    methods = info.methods - {"HEAD"}
    for other in api:
        twin = other.matcher
        if (
            isinstance(twin, Route)
            and twin.path_format == matcher.path_format
            and other.methods & methods
        ):
            return RouteInfo(other.key, info.path, info.methods, matcher)
    return info


class RouteResolver:
    """Finds the route of a request among ``routes`` (flattened when first needed)."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self._routes = routes
        self._flat: list[RouteInfo] | None = None
        self._cache: dict[tuple[str, str], Resolved | None] = {}

    def resolve(self, scope: Scope) -> Resolved | None:
        """The first route that fully matches (as the router picks it), or None."""
        cache_key = (scope["method"], scope["path"])
        if cache_key in self._cache:
            return self._cache[cache_key]
        found = self._match(scope)
        if len(cache_key[1]) <= _CACHEABLE_PATH:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[cache_key] = found
        return found

    def _match(self, scope: Scope) -> Resolved | None:
        if self._flat is None:
            self._flat = flatten_routes(self._routes)
        for info in self._flat:
            match, child = info.matcher.matches(scope)
            if match is Match.FULL:
                return Resolved(info.key, dict(child.get("path_params", {})))
        return None

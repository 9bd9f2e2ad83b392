"""Which route a request reaches: the one route matcher of an app.

The app's routes are read in the router's order, and a request's route is the first that
matches it fully (path and method), as Starlette's router picks it — found with each route's
own ``matches()``, once per method and path, then kept. A FastAPI route is known by its
operationId. The security layer finds a route's permission rule by it
(:mod:`app.security.middleware`), and the app serves its busiest operations through it
(:mod:`app.routes.direct`).

Routes join the app flat (:func:`add_routes`), in the app's own list, so that every route is
visible here whatever FastAPI version keeps included routers nested.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Scope

_CACHE_SIZE: Final = 4096
_CACHEABLE_PATH: Final = 512  # longer paths are matched every time, never kept


@dataclass(frozen=True, slots=True)
class Found:
    """The route a request reaches and the path parameters its match gives."""

    route: BaseRoute
    key: str | None
    """The operationId of a FastAPI route, else the route's name."""
    path_params: dict[str, Any]
    """Shared by every request of the same method and path: read only."""


class RouteTable:
    """The routes of one app, matched the way its router matches them."""

    def __init__(self, routes: Sequence[BaseRoute]) -> None:
        self._routes = routes
        self._seen = -1  # how many routes the list had when the cache was filled
        self._cache: dict[tuple[str, str], Found | None] = {}

    def find(self, scope: Scope) -> Found | None:
        """The route ``scope``'s method and path reach (its first full match), or None."""
        routes = self._routes
        if len(routes) != self._seen:  # a route was added: match afresh
            self._cache.clear()
            self._seen = len(routes)
        cache_key = (scope["method"], scope["path"])
        try:
            return self._cache[cache_key]
        except KeyError:
            pass
        found = _first_full_match(routes, scope)
        if len(cache_key[1]) <= _CACHEABLE_PATH:
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[cache_key] = found
        return found


def _first_full_match(routes: Sequence[BaseRoute], scope: Scope) -> Found | None:
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            return Found(route, route_key(route), dict(child.get("path_params", {})))
    return None


def route_key(route: BaseRoute) -> str | None:
    """A FastAPI route's operationId (else its name); a plain route's name."""
    if isinstance(route, APIRoute):
        return route.operation_id or route.name
    if isinstance(route, Route):
        return route.name
    return getattr(route, "name", None)


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """Serve ``router``'s routes from ``app``, as routes of the app itself (in its own list,
    after the routes it has): the router has no prefix, dependencies or lifespan of its own to
    apply, and its routes carry the tags and answers they were declared with."""
    app.router.routes.extend(router.routes)

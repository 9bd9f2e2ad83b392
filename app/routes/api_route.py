"""How a route is written and served: one route class for every router of the app.

Every route is a FastAPI path operation: its parameters, body and answers are declared in the
endpoint's signature and decorator, and the OpenAPI document is generated from them; a
router is made with :func:`api_router` and joins the app with :func:`add_routes`.
:class:`ApiRoute` serves most routes through FastAPI's dependency machinery, as any
``APIRoute``. A route whose endpoint returns a ``Response`` itself and takes nothing but path
parameters, one query model (``Annotated[Model, Query()]``), the ``Request`` and dependencies
that need only the request (``BrokerDep``) is served directly instead: its parameters are
validated by FastAPI's own fields for them (same coercion, same 422 errors; the query model
read as FastAPI reads one, with the work FastAPI repeats per request done once), its
dependencies are called with the request, and the endpoint is awaited, without the
per-request exit stacks, body handling and dependency cache it has no use for (on a small
send or pull they cost about a quarter of the request). Same signature, same validation,
same answers -- tests/app/test_api_route.py sends the same requests both ways; the choice is
made once, when the route is built, by what the signature declares. While a test overrides a
dependency (``app.dependency_overrides``), FastAPI serves every route.

:class:`DirectRoutes`, the innermost layer of the app's middleware, hands a request for such a
route to it at once: the route found once per method and path (as the router finds it: the
first full match) and kept, the exception handlers the app's ``ExceptionMiddleware`` holds put
in the scope as that layer does, without the layers a direct route has no use for (that
middleware's own wrapper, FastAPI's exit stack, the router's walk over its routes).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

from fastapi import APIRouter, FastAPI
from fastapi._compat import ModelField, field_annotation_is_sequence, get_cached_model_fields
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import _get_param_aliases as _param_aliases
from fastapi.dependencies.utils import _get_param_model as _param_model
from fastapi.dependencies.utils import _is_json_field, get_typed_return_annotation
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette._utils import is_async_callable
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Router
from starlette.types import ASGIApp, ExceptionHandler, Receive, Scope, Send

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
RequestDependency = tuple[str, Callable[[Request], Awaitable[Any]]]
ExceptionHandlers = tuple[dict[Any, ExceptionHandler], dict[int, ExceptionHandler]]

_HANDLERS_KEY: Final = "starlette.exception_handlers"  # where ExceptionMiddleware puts them
PARSED_QUERY: Final = "spoolmq.parsed_query"
"""Scope key where a layer in front of the routes leaves the query it parsed: (the query
string, its ``QueryParams``). A direct route reads that instead of parsing the query again,
as long as the scope's query string is still the one parsed."""
_CACHE_SIZE: Final = 4096
_CACHEABLE_PATH: Final = 512  # longer paths are matched every time, never kept


class ApiRoute(APIRoute):
    """FastAPI's route, served directly when its signature allows (see the module)."""

    direct_app: ASGIApp | None
    """The route served directly (no dependency overrides), or None when FastAPI serves it."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        self.direct_app = None
        direct = direct_handler(self.dependant)
        if direct is None or self.max_body_size is not None:
            return
        general = self.app
        served = self.direct_app = serve_directly(direct)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            # A test may override a dependency: FastAPI's own handling honours that.
            if scope["app"].dependency_overrides:
                await general(scope, receive, send)
            else:
                await served(scope, receive, send)

        self.app = app


def serve_directly(handler: Handler) -> ASGIApp:
    """Starlette's ``request_response(handler)``: an exception the handler raises is answered
    by the app's handler for it (found by the exception's class, an ``HTTPException`` first by
    its status), one without a handler propagates. The handler returns its response before
    sending anything, so no wrapper has to watch the sends for the start of one."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive, send)
        try:
            response = await handler(request)
        except Exception as exc:
            answer = _exception_handler(scope, exc)
            if answer is None:
                raise
            if is_async_callable(answer):
                handled = await answer(request, exc)  # type: ignore[arg-type]
            else:
                handled = await run_in_threadpool(answer, request, exc)
            exc.with_traceback(None)  # as Starlette does: a reused instance keeps no trace
            if handled is None:
                return
            response = handled
        await response(scope, receive, send)

    return app


def _exception_handler(scope: Scope, exc: Exception) -> ExceptionHandler | None:
    handlers: ExceptionHandlers = scope.get(_HANDLERS_KEY) or ({}, {})
    by_class, by_status = handlers
    if isinstance(exc, HTTPException):
        found = by_status.get(exc.status_code)
        if found is not None:
            return found
    for cls in type(exc).__mro__:
        if cls in by_class:
            return by_class[cls]
    return None


class DirectRoutes:
    """The innermost middleware: serves a request for a route served directly (see the
    module) itself; every other request goes on to ``app`` (the app's ExceptionMiddleware).

    The route is the one the router would pick -- the first of its routes that matches fully
    -- found once for a method and path. The scope gets what that middleware, the router and
    the route's match put in it (exception handlers, router, endpoint, route, path
    parameters). Off when ``app`` is not an ExceptionMiddleware (whose handlers it needs),
    when the router applies form limits, while a test overrides a dependency, and for a
    request FastAPI's telemetry follows.
    """

    def __init__(self, app: ASGIApp, router: Router) -> None:
        self.app = app
        self.router = router
        by_class = getattr(app, "_exception_handlers", None)
        by_status = getattr(app, "_status_handlers", None)
        self.handlers: ExceptionHandlers | None = None
        if by_class is not None and by_status is not None:
            self.handlers = (by_class, by_status)
        if getattr(router, "form_limits", None):
            self.handlers = None
        self._cache: dict[tuple[str, str, str], tuple[ApiRoute, Scope] | None] = {}
        self._routes = 0  # how many routes the router had when the cache was filled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handlers = self.handlers
        if handlers is None or scope["type"] != "http" or "fastapi.telemetry" in scope:
            await self.app(scope, receive, send)
            return
        found = self._find(scope)
        if found is None or scope["app"].dependency_overrides:
            await self.app(scope, receive, send)
            return
        route, child = found
        scope[_HANDLERS_KEY] = handlers
        scope.setdefault("router", self.router)
        scope.update(child)
        scope["path_params"] = dict(child["path_params"])  # the request's own
        await route.direct_app(scope, receive, send)  # type: ignore[misc]  # found: not None

    def _find(self, scope: Scope) -> tuple[ApiRoute, Scope] | None:
        key = (scope["method"], scope["path"], scope.get("root_path", ""))
        cache = self._cache
        routes = self.router.routes
        if len(routes) != self._routes:  # a route was added: match afresh
            cache.clear()
            self._routes = len(routes)
        try:
            return cache[key]
        except KeyError:
            pass
        found = _first_full_match(routes, scope)
        if len(key[1]) <= _CACHEABLE_PATH:
            if len(cache) >= _CACHE_SIZE:
                cache.clear()
            cache[key] = found
        return found


def _first_full_match(routes: list[BaseRoute], scope: Scope) -> tuple[ApiRoute, Scope] | None:
    """The route the router picks for ``scope`` and what its match adds to the scope, when
    that route is served directly; else None."""
    for route in routes:
        match, child = route.matches(scope)
        if match is Match.FULL:
            if isinstance(route, ApiRoute) and route.direct_app is not None:
                return route, child
            return None
    return None


def api_router(**kwargs: Any) -> APIRouter:
    """An ``APIRouter`` whose routes are :class:`ApiRoute`s: how every router is made."""
    return APIRouter(route_class=ApiRoute, **kwargs)


def add_routes(app: FastAPI, router: APIRouter) -> None:
    """Serve ``router``'s routes from ``app``, as routes of the app itself.

    ``include_router`` would put the router in front of its routes as one more layer that
    every request walks (with its own scope bookkeeping) before a route is tried; the app's
    routers have no prefix, dependencies or lifespan of their own to apply, so their routes
    join the app's list as they are, with the tags and answers they were declared with.
    """
    for route in router.routes:
        if not isinstance(route, ApiRoute):
            raise TypeError(f"{route!r} is not an ApiRoute: make its router with api_router")
        app.router.routes.append(route)


def direct_handler(dependant: Dependant) -> Handler | None:
    """A handler that serves ``dependant`` without FastAPI's machinery, or None when its
    signature declares anything beyond path parameters, one query model, the request and
    request-only dependencies, or its endpoint does not return a ``Response``."""
    endpoint = dependant.call
    if endpoint is None or not inspect.iscoroutinefunction(endpoint):
        return None
    returns = get_typed_return_annotation(endpoint)
    if not (inspect.isclass(returns) and issubclass(returns, Response)):
        return None
    if not _only_parameters(dependant):
        return None
    dependencies = _request_dependencies(dependant)
    query = _query_model_reader(dependant.query_params)
    if dependencies is None or query is None:
        return None
    path = [(field, _param_aliases(field)[0][1], checked(field)) for field in dependant.path_params]
    request_name = dependant.request_param_name

    async def handler(request: Request) -> Response:
        values: dict[str, Any] = {}
        errors: list[Any] = []
        path_params = request.path_params
        for field, alias, check in path:
            value = path_params[alias]
            if field.field_info.metadata or field.field_info.annotation is not str:
                value, field_errors = check(value, ("path", alias))
                if field_errors:
                    errors += field_errors
                    continue
            # else: a path segment is a str, and a str without constraints validates as itself
            values[field.name] = value
        query(query_params(request), values, errors)
        if errors:
            raise RequestValidationError(errors)
        if request_name is not None:
            values[request_name] = request
        for name, dependency in dependencies:
            values[name] = await dependency(request)
        response: Response = await endpoint(**values)
        return response

    return handler


def query_params(request: Request) -> QueryParams:
    """The request's query, parsed by a layer in front (:data:`PARSED_QUERY`) or now (none:
    one shared empty query, read-only as every ``QueryParams``)."""
    scope = request.scope
    query_string = scope["query_string"]
    if not query_string:
        return _NO_QUERY
    parsed = scope.get(PARSED_QUERY)
    if parsed is not None and parsed[0] == query_string:
        params: QueryParams = parsed[1]
        return params
    return request.query_params


_NO_QUERY: Final = QueryParams("")


def parse_query(raw: bytes) -> QueryParams:
    """``QueryParams(raw)``: the same pairs, in the same ``QueryParams``. A query without
    ``%`` or ``+`` (a pull's, nearly always) has nothing for ``parse_qsl`` to unquote: its
    pairs are its ``&``-separated items split at the first ``=`` (an item without one has an
    empty value; empty items are left out), made into a ``QueryParams`` at once
    (:func:`query_of`). tests/app/test_api_route.py checks both ways agree."""
    text = raw.decode("latin-1")
    if "%" in text or "+" in text:
        return QueryParams(raw)
    return query_of([(n, v) for n, _, v in (i.partition("=") for i in text.split("&") if i)])


def query_of(pairs: list[tuple[str, str]]) -> QueryParams:
    """``QueryParams(pairs)`` of name and value strings, without the checks and copies its
    constructor makes of any mapping or iterable it may be given: what it keeps of such a
    list is the list and a dict of each name's last value."""
    query: QueryParams = QueryParams.__new__(QueryParams)
    query._list = pairs
    query._dict = dict(pairs)
    return query


QueryReader = Callable[[QueryParams, dict[str, Any], list[Any]], None]


def _query_model_reader(fields: list[ModelField]) -> QueryReader | None:
    """What FastAPI's ``request_params_to_args`` does for a route's one query model
    (``Annotated[Model, Query()]``), with what it works out on every request (each field's
    query name, whether it is a list) worked out once, by FastAPI's own functions: the
    model's fields by their query names (a list field from every occurrence, an empty one
    left out), the other names as extras for the model's extra policy, validated as one value
    with errors under ``query``. None when the route's query parameters are anything else."""
    if not fields:
        return _no_query
    model_field = fields[0]
    found = _param_model(model_field)
    if found is None or len(fields) > 1:
        return None
    model: type[BaseModel] = found
    if model_field.field_info.annotation is not model:
        return None  # an optional model: FastAPI decides when it is absent
    plan: list[tuple[list[tuple[str, str]], str, str, bool]] = []
    for field in get_cached_model_fields(model):  # type: ignore[arg-type]  # a class hashes
        if _is_json_field(field):
            return None
        aliases = _param_aliases(field)  # (validation alias, query name) by preference
        is_list = field_annotation_is_sequence(field.field_info.annotation)
        plan.append((aliases, *aliases[0], is_list))
    name = model_field.name
    check = checked(model_field)
    empty: list[tuple[Any, list[Any]]] = []  # what no query parameter at all gives

    def read(params: QueryParams, values: dict[str, Any], errors: list[Any]) -> None:
        if not params:
            if not empty:
                empty.append(model_field.validate({}, {}, loc=("query",)))
            value, model_errors = empty[0]
            if model_errors:
                errors += model_errors
            else:
                values[name] = value  # one instance for every such request: read-only values
            return
        data: dict[str, Any] = {}
        known: set[str] = set()
        # What QueryParams.get finds (a name's last value), without its Python-level Mapping
        # lookup that raises and catches a KeyError for every name the query leaves out.
        last = dict(params.items())
        for aliases, alias, key, is_list in plan:
            if len(aliases) > 1:
                alias, key = next((pair for pair in aliases if pair[1] in params), aliases[0])
            known.add(key)
            if is_list:
                items = params.getlist(key)
                if items:
                    data[alias] = items
            else:
                value = last.get(key)
                if value is not None:
                    data[alias] = value
        if len(params) > len(data):
            extras: dict[str, list[str]] = {}
            for key, item in params.multi_items():
                if key not in known:
                    extras.setdefault(key, []).append(item)
            data.update((key, v[0] if len(v) == 1 else v) for key, v in extras.items())
        value, model_errors = check(data, ("query",))
        if model_errors:
            errors += model_errors
        else:
            values[name] = value

    return read


FieldCheck = Callable[[Any, tuple[str, ...]], tuple[Any, list[Any]]]


def checked(field: ModelField) -> FieldCheck:
    """``field.validate`` (the value, or FastAPI's errors under ``loc``) for a request's
    parameters: a valid value straight from the pydantic validator of the field's own
    ``TypeAdapter`` -- what ``validate`` calls, without its two wrappers -- and an invalid
    one checked again by ``validate`` itself, so its errors are FastAPI's to the letter."""
    adapter = field._type_adapter

    def check(value: Any, loc: tuple[str, ...]) -> tuple[Any, list[Any]]:
        try:
            return adapter.validator.validate_python(value, from_attributes=True), _NO_ERRORS
        except ValidationError:
            return field.validate(value, {}, loc=loc)

    return check


_NO_ERRORS: Final[list[Any]] = []  # read-only: callers only test it and add it to theirs


def _no_query(params: QueryParams, values: dict[str, Any], errors: list[Any]) -> None:
    return None


def _only_parameters(dependant: Dependant) -> bool:
    return not (
        dependant.header_params
        or dependant.cookie_params
        or dependant.body_params
        or dependant.websocket_param_name
        or dependant.http_connection_param_name
        or dependant.response_param_name
        or dependant.background_tasks_param_name
        or dependant.security_scopes_param_name
    )


def _request_dependencies(dependant: Dependant) -> list[RequestDependency] | None:
    """(parameter name, coroutine taking the request) of each dependency, or None when one
    needs more than the request."""
    found: list[RequestDependency] = []
    for sub in dependant.dependencies:
        call = sub.call
        if (
            sub.name is None
            or call is None
            or not inspect.iscoroutinefunction(call)
            or sub.request_param_name is None
            or sub.dependencies
            or sub.path_params
            or sub.query_params
            or not _only_parameters(sub)
            or len(inspect.signature(call).parameters) != 1
        ):
            return None
        found.append((sub.name, call))  # its one parameter is the request
    return found

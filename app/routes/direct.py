"""The operations clients call in loops, served straight from their endpoints.

FastAPI's dispatch of a request (its middleware, the router's walk, the dependency solver and
the reading of a query model) costs as much as a whole send; for the few operations clients
call in loops that doubles their cost (``bench/asgi_bench.py``). :class:`DirectOperations`
serves those operations itself: the route found by the app's route table
(:mod:`app.routes.table`), the endpoint's arguments read from the request by the
declarations of its signature (:class:`EndpointArguments`), the endpoint awaited, an exception
answered by the app's handler for it. It does so inside the app's ASGI stack, as its
innermost middleware (:class:`DirectDispatch`: the broker, whose security sits outside it),
or below ASGI as the server's wire face (:class:`~app.routes.wire.EndpointFace`: the proxy).
Every other route is FastAPI's.

Which operations are served here is fixed when the app is built (their operationIds), not
chosen per request: an operation is always served the same way, in tests as in production.
Their endpoints are FastAPI path operations like every other — the OpenAPI document is
generated from them — whose signatures hold only what is read here: path parameters, at most
one query model (``Annotated[Model, Query()]``), the ``Request``, and dependencies that take
only the request. A signature with anything else is refused when the app is built.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Annotated, Any, Final, get_args, get_origin
from urllib.parse import parse_qsl

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.params import Depends, Path, Query
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.routes.table import RouteTable

Endpoint = Callable[..., Awaitable[Response]]
_SEQUENCES: Final = (list, tuple, set, frozenset, Sequence, Collection)


class DirectOperations:
    """The operations (``operations``: operationIds) an app serves straight from their
    endpoints: found by its route table, their arguments read, their exceptions answered by
    the app's handlers. :class:`DirectDispatch` serves them inside the app's ASGI stack,
    :class:`~app.routes.wire.EndpointFace` below it."""

    def __init__(self, fastapi: FastAPI, table: RouteTable, operations: Collection[str]) -> None:
        self.fastapi = fastapi
        self.table = table
        self.operations = frozenset(operations)
        self._arguments: dict[str, EndpointArguments] = {}  # by operationId

    def take(self, scope: Scope) -> EndpointArguments | None:
        """The endpoint of the operation ``scope`` asks for, if it is one of these — its
        route's parts then in ``scope`` as the router puts them there — else None."""
        found = self.table.find(scope)
        if found is None or found.key not in self.operations:
            return None
        route = found.route
        assert isinstance(route, APIRoute) and found.key is not None
        scope["app"] = self.fastapi
        scope["path_params"] = dict(found.path_params)
        scope["route"] = route
        scope["endpoint"] = route.endpoint
        arguments = self._arguments.get(found.key)
        if arguments is None:
            arguments = EndpointArguments(route.endpoint, route.param_convertors)
            self._arguments[found.key] = arguments
        return arguments

    async def answer(self, arguments: EndpointArguments, request: Request) -> Response:
        """The endpoint's answer to ``request``, or the app's answer to what it raised."""
        try:
            values = arguments.read(request)
            if arguments.dependencies:
                await arguments.depend(values, request, self.fastapi)
            return await arguments.endpoint(**values)
        except Exception as exc:
            return await self.handled(request, exc)

    async def handled(self, request: Request, exc: Exception) -> Response:
        """The app's answer to ``exc`` (an HTTPException's handler by its status first, else
        by the exception's class); re-raised when the app has no handler for it."""
        handlers = self.fastapi.exception_handlers
        handler = handlers.get(exc.status_code) if isinstance(exc, HTTPException) else None
        if handler is None:
            handler = next((handlers[c] for c in type(exc).__mro__ if c in handlers), None)
        if handler is None:
            raise exc
        answer = handler(request, exc)
        if inspect.isawaitable(answer):
            answer = await answer
        assert isinstance(answer, Response)
        return answer


class DirectDispatch:
    """ASGI middleware serving the app's direct operations (:class:`DirectOperations`);
    hands every other request to ``app`` (the rest of FastAPI's stack)."""

    def __init__(
        self, app: ASGIApp, fastapi: FastAPI, table: RouteTable, operations: Collection[str]
    ) -> None:
        self.app = app
        self.direct = DirectOperations(fastapi, table, operations)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            arguments = self.direct.take(scope)
            if arguments is not None:
                response = await self.direct.answer(arguments, Request(scope, receive, send))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class EndpointArguments:
    """How an endpoint's arguments are read from a request, worked out once from its
    signature (see the module)."""

    def __init__(self, endpoint: Endpoint, path_names: Collection[str]) -> None:
        self.endpoint = endpoint
        self.path_names = frozenset(path_names)
        self.request_name: str | None = None
        self.path: list[tuple[str, Callable[[str], Any] | None]] = []
        self.query: QueryModel | None = None
        self.query_name = ""
        self.dependencies: list[tuple[str, Callable[[Request], Any], bool]] = []
        hints = typing.get_type_hints(endpoint, include_extras=True)
        for name in inspect.signature(endpoint).parameters:
            self._declare(name, hints[name])

    def _declare(self, name: str, hint: Any) -> None:
        if hint is Request:
            self.request_name = name
            return
        marker = _marker(hint)
        if isinstance(marker, Depends):
            call = marker.dependency
            if call is None or len(inspect.signature(call).parameters) != 1:
                raise self._refused(name, "depends on more than the request")
            self.dependencies.append((name, call, inspect.iscoroutinefunction(call)))
        elif isinstance(marker, Query):
            model = get_args(hint)[0]
            if self.query is not None or not _is_model(model):
                raise self._refused(name, "is not the one query model")
            self.query, self.query_name = QueryModel(model), name
        elif name in self.path_names and (marker is None or isinstance(marker, Path)):
            # a plain str is the text the route matched, as it is; anything else is validated
            # by its adapter's core validator (TypeAdapter.validator, skipping its wrapper)
            check = None if hint is str else TypeAdapter(hint).validator.validate_python
            self.path.append((name, check))
        else:
            raise self._refused(name, "is not read by direct dispatch")

    def _refused(self, name: str, why: str) -> TypeError:
        return TypeError(f"{self.endpoint.__name__}: parameter {name} {why}")

    def read(self, request: Request) -> dict[str, Any]:
        """The endpoint's keyword arguments but its dependencies' (:meth:`depend`);
        RequestValidationError (FastAPI's, with the same error locations) for parameters that
        do not validate."""
        values: dict[str, Any] = {}
        errors: list[Any] = []
        scope = request.scope
        path_params = scope["path_params"]
        for name, check in self.path:
            if check is None:
                values[name] = path_params[name]
                continue
            try:
                values[name] = check(path_params[name])
            except ValidationError as exc:
                errors += _located(exc, ("path", name))
        if self.query is not None:
            try:
                values[self.query_name] = self.query.read(scope["query_string"])
            except ValidationError as exc:
                errors += _located(exc, ("query",))
        if errors:
            raise RequestValidationError(errors)
        if self.request_name is not None:
            values[self.request_name] = request
        return values

    async def depend(self, values: dict[str, Any], request: Request, app: FastAPI) -> None:
        """The values of the endpoint's dependencies, into ``values`` (the app's overrides
        of them called instead, as FastAPI calls them)."""
        overrides: dict[Any, Callable[[Request], Any]] = app.dependency_overrides
        for name, call, awaited in self.dependencies:
            if overrides:
                call = overrides.get(call, call)
                awaited = inspect.iscoroutinefunction(call)
            values[name] = await call(request) if awaited else call(request)


class QueryModel:
    """A query model read as FastAPI reads one: each field by its alias, a sequence from every
    occurrence of its name, anything else from the name's last occurrence, names the model
    does not know passed along for its ``extra`` policy."""

    def __init__(self, model: type[BaseModel]) -> None:
        self.model = model
        self.empty: BaseModel | None = None
        self.lists = frozenset(
            field.alias or name
            for name, field in model.model_fields.items()
            if _is_sequence(field.annotation)
        )

    def read(self, query_string: bytes) -> BaseModel:
        if not query_string:  # the usual send: one read-only instance of the defaults
            if self.empty is None:
                self.empty = self.model.model_validate({})
            return self.empty
        data: dict[str, Any] = {}
        lists = self.lists
        for name, value in query_pairs(query_string):
            if name in lists:
                data.setdefault(name, []).append(value)
            else:
                data[name] = value
        return self.model.model_validate(data)


def query_pairs(query_string: bytes) -> list[tuple[str, str]]:
    """``parse_qsl`` of a query string, empty values kept; a query with nothing to unquote (no
    ``%``, no ``+``: the usual one) is split at ``&`` and ``=`` directly."""
    if not query_string:
        return []
    text = query_string.decode("latin-1")
    if "%" in text or "+" in text:
        return parse_qsl(text, keep_blank_values=True)
    return [(name, value) for name, _, value in (p.partition("=") for p in text.split("&") if p)]


def _is_model(kind: Any) -> bool:
    return inspect.isclass(kind) and issubclass(kind, BaseModel)


def _marker(hint: Any) -> Any:
    """The FastAPI marker (``Path()``, ``Query()``, ``Depends()``) of an ``Annotated`` hint."""
    if get_origin(hint) is not Annotated:
        return None
    return next((m for m in get_args(hint)[1:] if isinstance(m, Path | Query | Depends)), None)


def _is_sequence(annotation: Any) -> bool:
    """Whether a field's type is a list or another sequence (or an optional one)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _is_sequence(get_args(annotation)[0])
    if origin is typing.Union or origin is type(int | None):
        return any(_is_sequence(a) for a in get_args(annotation) if a is not type(None))
    return origin in _SEQUENCES or annotation in _SEQUENCES


def _located(exc: ValidationError, where: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{**e, "loc": (*where, *e["loc"])} for e in exc.errors(include_url=False)]

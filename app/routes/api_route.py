"""How a route is written and served: one route class for every router of the app.

Every route is a FastAPI path operation: its parameters, body and answers are declared in the
endpoint's signature and decorator, and the OpenAPI document is generated from them.
:class:`ApiRoute` serves most of them through FastAPI's dependency machinery, as any
``APIRoute``. A route whose endpoint returns a ``Response`` itself and takes nothing but path
parameters, query parameters (one query model, ``Annotated[Model, Query()]``, or single
ones), the ``Request`` and dependencies that need only the request (``BrokerDep``) is served
directly instead: its parameters are read and validated by FastAPI's own function for them
(``request_params_to_args``: same fields, same coercion, same 422 errors), its dependencies
are called with the request, and the endpoint is awaited, without the per-request exit
stacks, body handling and dependency cache it has no use for. That is most of the time a
small send or pull spent in FastAPI. Same signature, same validation, same answers; the
choice is made once, when the route is built, and only by what the signature declares.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import APIRouter
from fastapi.dependencies.models import Dependant
from fastapi.dependencies.utils import get_typed_return_annotation, request_params_to_args
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

Handler = Callable[[Request], Coroutine[Any, Any, Response]]
RequestDependency = tuple[str, Callable[[Request], Awaitable[Any]]]


class ApiRoute(APIRoute):
    """FastAPI's route, served directly when its signature allows (see the module)."""

    def get_route_handler(self) -> Handler:
        general = super().get_route_handler()
        direct = direct_handler(self.dependant)
        if direct is None:
            return general

        async def handler(request: Request) -> Response:
            # A test may override a dependency: FastAPI's own handling honours that.
            if request.app.dependency_overrides:
                return await general(request)
            return await direct(request)

        return handler


def api_router(**kwargs: Any) -> APIRouter:
    """An ``APIRouter`` whose routes are :class:`ApiRoute`s: how every router is made."""
    return APIRouter(route_class=ApiRoute, **kwargs)


def direct_handler(dependant: Dependant) -> Handler | None:
    """A handler that serves ``dependant`` without FastAPI's machinery, or None when its
    signature declares anything beyond path and query parameters, the request and
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
    if dependencies is None:
        return None
    path_fields = dependant.path_params
    query_fields = dependant.query_params
    request_name = dependant.request_param_name

    async def handler(request: Request) -> Response:
        values, errors = request_params_to_args(path_fields, request.path_params)
        if query_fields:
            query, query_errors = request_params_to_args(query_fields, request.query_params)
            values.update(query)
            errors += query_errors
        if errors:
            raise RequestValidationError(errors)
        if request_name is not None:
            values[request_name] = request
        for name, call in dependencies:
            values[name] = await call(request)
        response: Response = await endpoint(**values)
        return response

    return handler


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
        ):
            return None
        request_name = sub.request_param_name

        async def call_with_request(
            request: Request,
            call: Callable[..., Awaitable[Any]] = call,
            request_name: str = request_name,
        ) -> Any:
            return await call(**{request_name: request})

        found.append((sub.name, call_with_request))
    return found

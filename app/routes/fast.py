"""Plain Starlette routes in front of the three hot FastAPI routes: send, pull, group pull.

FastAPI resolves path parameters through its dependency machinery on every request, which
cost about a quarter of a small send or pull. These routes match the same paths and methods
first and call the same endpoint functions with the path parameters already converted; the
FastAPI routes stay registered and are what the OpenAPI document describes. A path the
routes here do not match (a queue id that is not a number) falls through to FastAPI's routes
and gets FastAPI's 422. Errors raised here go through the same exception handlers.
"""

from __future__ import annotations

from typing import Annotated

from fastapi.exceptions import RequestValidationError
from pydantic import Field, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from app.routes.groups import pull_group_messages
from app.routes.messages import pull_messages, send_messages
from app.schemas import MAX_QUEUES, checked_group_name

_QUEUE_ID: TypeAdapter[int] = TypeAdapter(Annotated[int, Field(ge=0, lt=MAX_QUEUES)])


def _queue_id(value: int) -> int:
    try:
        return _QUEUE_ID.validate_python(value)
    except ValidationError as exc:
        errors = [{**e, "loc": ("path", "queue_id")} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


async def _send(request: Request) -> Response:
    return await send_messages(request.path_params["topic"], request)


async def _pull(request: Request) -> Response:
    params = request.path_params
    return await pull_messages(params["topic"], _queue_id(params["queue_id"]), request)


async def _pull_group(request: Request) -> Response:
    params = request.path_params
    group = checked_group_name(params["group"])
    return await pull_group_messages(group, params["topic"], request)


def fast_routes() -> list[Route]:
    """Routes to put before the app's own (``app.router.routes[0:0] = fast_routes()``)."""
    return [
        Route("/v1/topics/{topic}/messages", _send, methods=["POST"]),
        Route("/v1/topics/{topic}/queues/{queue_id:int}/messages", _pull, methods=["GET"]),
        Route("/v1/groups/{group}/topics/{topic}/messages", _pull_group, methods=["GET"]),
    ]

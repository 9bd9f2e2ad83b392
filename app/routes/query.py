"""Query parameters of the hot routes, parsed by one model validation instead of per parameter.

FastAPI resolves each query parameter separately on every request; on the send and pull paths
that was a third of the request time. :func:`parse_query` validates the query string against a
pydantic model in one call, and :func:`query_parameters` documents the same model's fields as
OpenAPI query parameters, so the schema and the parsing cannot drift apart.
"""

from __future__ import annotations

import typing
from functools import cache
from typing import Any, TypeVar

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


@cache
def _fields(model: type[BaseModel]) -> tuple[tuple[str, bool], ...]:
    """(query name, is a list) of every field."""
    fields = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        args = typing.get_args(annotation) or (annotation,)
        is_list = any(typing.get_origin(a) is list or a is list for a in args)
        fields.append((field.alias or name, is_list))
    return tuple(fields)


def parse_query(request: Request, model: type[M]) -> M:
    """The query string as ``model``; RequestValidationError (422) when it does not fit."""
    params = request.query_params
    data: dict[str, Any] = {}
    if params:
        for key, is_list in _fields(model):
            if key in params:
                data[key] = params.getlist(key) if is_list else params[key]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("query", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    """OpenAPI parameter objects for the fields of ``model``."""
    schema = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
    parameters = []
    for name, prop in schema["properties"].items():
        prop = dict(prop)
        description = prop.get("description", "")
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": name in schema.get("required", ()),
                "schema": prop,
                "description": description,
            }
        )
    return parameters

"""The OpenAPI document: FastAPI's, plus the schemas routes reference by hand.

The send route reads its body itself (JSON or raw), so its request schemas and the Problem
schema of every error response are added here; every response also documents X-Request-Id.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from app.schemas import Problem, SendBatch, SendMessage

_REQUEST_ID_HEADER = {
    "X-Request-Id": {
        "description": "The client's X-Request-Id, or one the server made up.",
        "schema": {"type": "string"},
    }
}


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (cached on the app)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    _, extra = models_json_schema(
        [(SendMessage, "validation"), (SendBatch, "validation"), (Problem, "serialization")],
        ref_template="#/components/schemas/{model}",
    )
    for name, definition in extra.get("$defs", {}).items():
        components.setdefault(name, definition)
    schema["components"]["schemas"] = dict(sorted(components.items()))
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            for response in operation.get("responses", {}).values():
                response.setdefault("headers", {}).update(_REQUEST_ID_HEADER)
    app.openapi_schema = schema
    return schema

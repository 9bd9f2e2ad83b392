"""The OpenAPI document: FastAPI's, plus the schemas routes reference by hand.

The send route reads its body itself (JSON or raw), so its request schemas and the Problem
schema of every error response are added here; every response also documents X-Request-Id.
Security comes from :mod:`app.security.policy`: the ``bearerAuth`` scheme, each
operation's ``security`` and its 401/403/429 answers (and 408 where there is a body).
Integer bounds are written as integers (FastAPI's document model holds them as floats, which
would turn 2^63-1 into 9.223372036854776e+18, beyond the 64-bit range).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from app.errors import PROBLEM_MEDIA_TYPE
from app.schemas import INT64_MAX, Problem, SendBatch, SendMessage
from app.security.policy import Access, rule_for

_REQUEST_ID_HEADER = {
    "X-Request-Id": {
        "description": "The client's X-Request-Id, or one the server made up.",
        "schema": {"type": "string"},
    }
}

_UNSUPPORTED_MEDIA_TYPE = {
    "description": "The body is not JSON (no `Content-Type: application/json`; `curl -d` alone "
    "sends a form): UNSUPPORTED_MEDIA_TYPE, naming the Content-Type sent.",
    "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
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
    _integer_bounds(schema)
    security = getattr(app.state, "security", None)
    _add_security(schema, auth_required=security is not None and security.auth_enabled)
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            if "requestBody" in operation:
                operation["responses"].setdefault("415", _UNSUPPORTED_MEDIA_TYPE)
            for response in operation.get("responses", {}).values():
                response.setdefault("headers", {}).update(_REQUEST_ID_HEADER)
    app.openapi_schema = schema
    return schema


_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_PYDANTIC_BOUNDS = {
    "ge": "minimum",
    "le": "maximum",
    "gt": "exclusiveMinimum",
    "lt": "exclusiveMaximum",
}
"""Pydantic writes a bound under its own name when it cannot put it on the integer schema
itself, as for an optional :data:`app.schemas.JsonInt`."""


def _integer_bounds(node: Any) -> None:
    """Write the bounds of every ``integer`` schema as JSON Schema bounds and as integers,
    2^63-1 exactly."""
    if isinstance(node, list):
        for item in node:
            _integer_bounds(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "integer":
        for name, key in _PYDANTIC_BOUNDS.items():
            if name in node:
                node[key] = node.pop(name)
        for key in _BOUNDS:
            value = node.get(key)
            if isinstance(value, float) and value.is_integer():
                node[key] = INT64_MAX if value == float(INT64_MAX) else int(value)
    for value in node.values():
        _integer_bounds(value)


# ==================================================================== security

SECURITY_DESCRIPTION = """
**Security.** Every operation but `/healthz` and `/readyz` takes a bearer token
(`Authorization: Bearer <token>`) when the server runs with an auth file: a missing or bad
token is 401, a token without the permission 403 (checked before anything is looked up, so a
403 never says whether a topic exists). Permissions: `produce` on topic patterns, `consume`
on group and topic patterns, `admin`. Each token has a request rate (429 with `Retry-After`
beyond it) and a cap on its waiting long-polls (429). Without an auth file the server listens
on loopback only and every caller is admin. Slow clients: a request's headers must arrive
within 10 s and fit in 64 KiB (408, 431), a body that stalls for 30 s is cut (408), and a pull
answers with at most 8 MiB of messages (plus one larger message) whatever its `max_bytes`.
"""

_BEARER = {
    "type": "http",
    "scheme": "bearer",
    "description": "A token from the server's auth file (`spoolmq token create`).",
}
_PROBLEM = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer"},
    }
}
_ANSWERS: dict[str, dict[str, Any]] = {
    "401": {
        "description": "No bearer token, or not a valid one (UNAUTHORIZED).",
        "headers": {
            "WWW-Authenticate": {
                "description": 'The scheme to use: `Bearer realm="spoolmq"`.',
                "schema": {"type": "string"},
            }
        },
    },
    "403": {"description": "The token lacks the permission this needs (FORBIDDEN)."},
    "408": {"description": "The request body stopped arriving (REQUEST_TIMEOUT)."},
    "429": {
        "description": "The token is over its request rate (RATE_LIMITED) or has too many "
        "long-polls waiting (TOO_MANY_WAITERS); retry after `Retry-After` seconds.",
        "headers": _RETRY_AFTER,
    },
}


def _add_security(schema: dict[str, Any], *, auth_required: bool) -> None:
    """The bearer scheme, and each operation's security and 401/403/408/429 answers."""
    schema["info"]["description"] = schema["info"].get("description", "") + SECURITY_DESCRIPTION
    schema["components"]["securitySchemes"] = {"bearerAuth": _BEARER}
    # Without an auth file (the default settings) anonymous calls are accepted too.
    requirement: list[dict[str, list[str]]] = [{"bearerAuth": []}]
    if not auth_required:
        requirement.append({})
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            rule = rule_for(operation.get("operationId"))
            if rule.access is Access.PUBLIC:
                operation["security"] = []
                continue
            operation["security"] = requirement
            answers = ["401", "429"]
            if rule.access is not Access.AUTHENTICATED:
                answers.append("403")
            if "requestBody" in operation:
                answers.append("408")
            _add_answers(operation.setdefault("responses", {}), answers)


def _add_answers(responses: dict[str, Any], statuses: list[str]) -> None:
    for status in statuses:
        answer = _ANSWERS[status]
        existing = responses.get(status)
        if existing is None:
            responses[status] = {**answer, "content": _PROBLEM}
            continue
        existing["description"] = f"{existing['description']} Or: {answer['description']}"
        existing.setdefault("headers", {}).update(answer.get("headers", {}))
    ordered = sorted(responses.items(), key=lambda item: (not item[0].isdigit(), item[0]))
    responses.clear()
    responses.update(ordered)

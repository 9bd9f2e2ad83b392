"""The OpenAPI document: FastAPI's, plus the schemas routes reference by hand.

The send route reads its body itself (JSON or raw), so its request schemas and the Problem
schema are added here; every response also documents X-Request-Id. Each operation's problem
answers come from :mod:`app.problem_codes`: per status, the codes it can answer, with their
meanings and as the ``code`` enum. Security comes from :mod:`app.security.policy`: the
``bearerAuth`` scheme and each operation's ``security``.
Integer bounds are written as integers (FastAPI's document model holds them as floats, which
would turn 2^63-1 into 9.223372036854776e+18, beyond the 64-bit range).
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from app.errors import PROBLEM_MEDIA_TYPE, status_title
from app.problem_codes import MEANINGS, PROBLEM_CODES_KEY, operation_codes
from app.replica_guard import is_write
from app.schemas import INT64_MAX, Problem, SendBatch, SendMessage
from app.security.policy import Access, rule_for

_REQUEST_ID_HEADER = {
    "X-Request-Id": {
        "description": "The client's X-Request-Id, or one the server made up.",
        "schema": {"type": "string"},
    }
}


def build_openapi(app: FastAPI, *, proxied: bool = False) -> dict[str, Any]:
    """The app's OpenAPI document (cached on the app); ``proxied``: a proxy's, whose
    operations also answer its own codes (:data:`app.problem_codes.PROXY_CODES`)."""
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
    settings = getattr(app.state, "settings", None)
    if settings is not None:
        levels = len(settings.message_delay_levels.split())
        maximums = {"delay_level": levels, "deliver_after_ms": settings.timer_max_delay_s * 1000}
        _send_bounds(schema, maximums)
    security = getattr(app.state, "security", None)
    _add_security(schema, auth_required=security is not None and security.auth_enabled)
    for path, path_item in schema.get("paths", {}).items():
        for method, operation in path_item.items():
            _add_problems(operation, is_write(_scope_of(method, path)), proxied)
            for response in operation.get("responses", {}).values():
                response.setdefault("headers", {}).update(_REQUEST_ID_HEADER)
    for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422, replaced
        schema["components"]["schemas"].pop(unused, None)
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


def _send_bounds(schema: dict[str, Any], maximums: dict[str, int]) -> None:
    """The maximum of each named field of a send as this broker takes it (a ``delay_level``
    up to its delay table, a ``deliver_after_ms`` up to its longest timer delay): in the
    message and batch models and in the raw send's query."""
    components = schema["components"]["schemas"]
    fields = [components[model]["properties"] for model in ("SendMessage", "SendBatch")]
    send = schema["paths"]["/v1/topics/{topic}/messages"]["post"]
    fields.append({p["name"]: p["schema"] for p in send.get("parameters", [])})
    for properties in fields:
        for name, maximum in maximums.items():
            field = properties.get(name)
            for branch in [] if field is None else field.get("anyOf", [field]):
                if branch.get("type") == "integer":
                    branch["maximum"] = maximum


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


def _add_security(schema: dict[str, Any], *, auth_required: bool) -> None:
    """The bearer scheme, and each operation's security requirement."""
    schema["info"]["description"] = schema["info"].get("description", "") + SECURITY_DESCRIPTION
    schema["components"]["securitySchemes"] = {"bearerAuth": _BEARER}
    # Without an auth file (the default settings) anonymous calls are accepted too.
    requirement: list[dict[str, list[str]]] = [{"bearerAuth": []}]
    if not auth_required:
        requirement.append({})
    for path_item in schema.get("paths", {}).values():
        for operation in path_item.values():
            public = rule_for(operation.get("operationId")).access is Access.PUBLIC
            operation["security"] = [] if public else requirement


# ==================================================================== problems

_PROBLEM_REF: Final = "#/components/schemas/Problem"
_RETRY_AFTER: Final = {
    "Retry-After": {
        "description": "Seconds to wait before retrying.",
        "schema": {"type": "integer"},
    }
}
_WWW_AUTHENTICATE: Final = {
    "WWW-Authenticate": {
        "description": 'The scheme to use: `Bearer realm="spoolmq"`.',
        "schema": {"type": "string"},
    }
}
_HEADERS_BY_STATUS: Final = {401: _WWW_AUTHENTICATE, 429: _RETRY_AFTER, 503: _RETRY_AFTER}


def _scope_of(method: str, path: str) -> dict[str, Any]:
    """A request scope of an operation, as the slave guard reads it (a group pull counted as
    one that commits: it may)."""
    return {"method": method.upper(), "path": path, "query_string": b"auto_commit=true"}


def _add_problems(operation: dict[str, Any], write: bool, proxied: bool) -> None:
    """The operation's problem answers, one per status: each code it can answer
    (:mod:`app.problem_codes`) with its meaning, and the codes as the ``code`` enum."""
    operation_id = operation.get("operationId", "")
    rule = rule_for(operation_id)
    access = rule.access
    by_status = operation_codes(
        operation_id,
        parameters=bool(operation.get("parameters")),
        body="requestBody" in operation,
        authenticated=access is not Access.PUBLIC,
        # a permission of its own, or one on what the body names (a transaction's topic)
        permitted=access not in (Access.PUBLIC, Access.AUTHENTICATED) or rule.body is not None,
        write=write,
        proxied=proxied,
    )
    responses = operation.setdefault("responses", {})
    for status, codes in by_status.items():
        responses[str(status)] = _problem_answer(status, codes)
    ordered = sorted(responses.items(), key=lambda item: (not item[0].isdigit(), item[0]))
    responses.clear()
    responses.update(ordered)


def _problem_answer(status: int, codes: list[str]) -> dict[str, Any]:
    lines = "\n".join(f"- `{code}`: {MEANINGS.get(code, code)}." for code in codes)
    answer: dict[str, Any] = {
        "description": f"{status_title(status)}:\n\n{lines}",
        "content": {
            PROBLEM_MEDIA_TYPE: {
                "schema": {"$ref": _PROBLEM_REF, "properties": {"code": {"enum": codes}}}
            }
        },
        PROBLEM_CODES_KEY: codes,
    }
    headers = _HEADERS_BY_STATUS.get(status)
    if headers is not None:
        answer["headers"] = dict(headers)
    return answer

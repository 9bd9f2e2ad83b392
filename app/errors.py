"""The one place that maps errors to HTTP: ``application/problem+json`` with a stable ``code``.

Domain errors (:mod:`services.errors`, :mod:`storage.errors`) carry an HTTP-agnostic ``code``;
:data:`~app.problem_codes.STATUS_BY_CODE` turns it into a status, and an answer with a code
its operation does not declare is logged (:func:`~app.problem_codes.declares`). Errors of the
HTTP shell itself (malformed JSON, an oversized body, a bad body encoding) are
:class:`ApiError` with their own status.
A client mistake is never a 5xx: only unexpected exceptions and an unavailable store are.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any, Final

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import Response
from starlette.routing import Match

from app.problem_codes import STATUS_BY_CODE, declares
from services.errors import (
    BrokerUnavailableError,
    NotMasterError,
    ServiceError,
    StorageError,
    TooManyWaitersError,
)

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE: Final = "application/problem+json"
UNDECLARED_CODE: Final = "operation %s answered %d %s, a code it does not declare"
"""The log line of an answer outside its operation's declared codes (the tests fail on it)."""


class ApiError(Exception):
    """An error of the HTTP shell itself (not a domain rule)."""

    def __init__(self, code: str, detail: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})


def problem_body(
    status: int,
    code: str,
    detail: str,
    instance: str,
    request_id: str,
    errors: list[dict[str, Any]] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> bytes:
    body: dict[str, Any] = {
        "type": f"urn:spoolmq:problem:{code.lower().replace('_', '-')}",
        "title": status_title(status),
        "status": status,
        "detail": detail,
        "code": code,
        "instance": instance,
        "request_id": request_id,
    }
    if errors is not None:
        body["errors"] = errors
    if extensions:
        body.update(extensions)
    return orjson.dumps(body)


def problem_response(
    request: Request,
    code: str,
    detail: str,
    *,
    status: int | None = None,
    headers: Mapping[str, str] | None = None,
    errors: list[dict[str, Any]] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> Response:
    status = status or STATUS_BY_CODE.get(code, 500)
    operation_id = getattr(request.scope.get("route"), "operation_id", None)
    if status != 500 and not declares(operation_id, status, code):
        log.error(UNDECLARED_CODE, operation_id, status, code)
    request_id = request.scope.get("state", {}).get("request_id", "")
    content = problem_body(status, code, detail, request.url.path, request_id, errors, extensions)
    return Response(content, status, headers=dict(headers or {}), media_type=PROBLEM_MEDIA_TYPE)


def status_title(status: int) -> str:
    """The status's reason phrase (a problem's ``title``), "Error" for one without."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


# ==================================================================== handlers


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    headers = {}
    if isinstance(exc, TooManyWaitersError | BrokerUnavailableError):
        headers["Retry-After"] = str(exc.retry_after_s)
    return _domain_problem(request, exc.code, str(exc), headers)


def not_master_response(request: Request, exc: NotMasterError) -> Response:
    """421 NOT_MASTER with the master's HTTP address in ``master`` (a problem extension);
    503 NO_MASTER with Retry-After while the group has no master to name."""
    headers = {}
    retry_after = getattr(exc, "retry_after_s", None)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return problem_response(
        request, exc.code, str(exc), headers=headers, extensions={"master": exc.master}
    )


async def _not_master_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, NotMasterError)
    return not_master_response(request, exc)


async def _storage_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StorageError)
    headers = {"Retry-After": "5"} if STATUS_BY_CODE.get(exc.code) == 503 else {}
    return _domain_problem(request, exc.code, str(exc), headers)


def _domain_problem(
    request: Request, code: str, detail: str, headers: Mapping[str, str]
) -> Response:
    if code not in STATUS_BY_CODE:
        log.error("no HTTP status for error code %s (%s)", code, detail)
    elif STATUS_BY_CODE[code] == 500:
        log.error("server fault %s: %s", code, detail)
    return problem_response(request, code, detail, headers=headers)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return problem_response(request, exc.code, exc.detail, headers=exc.headers)


def is_json_media_type(content_type: str) -> bool:
    """``application/json`` or any ``application/*+json``, parameters ignored."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def json_body_required(content_type: str) -> ApiError:
    """A JSON route reached without a JSON body (curl's ``-d`` alone sends a form)."""
    given = f"Content-Type {content_type!r}" if content_type else "no Content-Type"
    return ApiError(
        "UNSUPPORTED_MEDIA_TYPE",
        f"this route takes a JSON body with Content-Type: application/json ({given} was sent; "
        "with curl add -H 'content-type: application/json')",
    )


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    raw = exc.errors()
    content_type = request.headers.get("content-type", "")
    if any(tuple(e.get("loc", ())) == ("body",) for e in raw) and not is_json_media_type(
        content_type
    ):
        refused = json_body_required(content_type)
        return problem_response(request, refused.code, refused.detail)
    if any(e.get("type") == "json_invalid" for e in raw):
        return problem_response(request, "MALFORMED_JSON", "the request body is not valid JSON")
    errors = [field_error(e) for e in raw]
    detail = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in errors[:5])
    return problem_response(request, "VALIDATION_FAILED", detail, errors=errors)


def field_error(error: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "loc": [p if isinstance(p, int) else str(p) for p in error.get("loc", ())],
        "msg": str(error.get("msg", "")),
        "type": str(error.get("type", "")),
    }


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    code = {404: "ROUTE_NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 413: "REQUEST_TOO_LARGE"}.get(
        status, "MALFORMED_JSON" if status == 400 else f"HTTP_{status}"
    )
    detail = str(exc.detail) if exc.detail else status_title(status)
    headers = dict(exc.headers or {})
    if status == 404:
        detail = f"no route matches {request.method} {request.url.path}"
    elif status == 405:
        # Starlette names only the first matching route's methods; list every route's.
        allowed = _allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} is not allowed here; use {', '.join(allowed)}"
    return problem_response(request, code, detail, status=status, headers=headers)


_METHODS: Final = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route answers on this path (probed through the public matches())."""
    allowed = []
    for method in _METHODS:
        probe = {**request.scope, "method": method}
        if any(route.matches(probe)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers; Starlette's MRO lookup routes every subclass to its base's."""
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(NotMasterError, _not_master_error)
    app.add_exception_handler(StorageError, _storage_error)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)

"""The admin login form: ``GET|POST /admin/login`` and ``POST /admin/logout``.

Logging in takes an admin token and opens a session (cookie ``spoolmq_session``). The login
form has its own CSRF token, bound to a short-lived ``spoolmq_login`` cookie (double
submit), so another site cannot log a browser in under its own token. Logging out needs the
session's CSRF token, like every other state-changing admin request (the middleware checks
it). Without an auth file there is nothing to log in to: both go to ``/admin/``.
"""

from __future__ import annotations

import asyncio
from typing import Final
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from jinja2 import Environment
from starlette.responses import HTMLResponse, RedirectResponse, Response

from app.security.audit import AuditRecord, utc_now
from app.security.guard import Security
from app.security.sessions import (
    CSRF_FIELD,
    SESSION_COOKIE,
    clear_cookie,
    is_https,
    new_secret,
    request_cookies,
    set_cookie,
    tokens_match,
)

LOGIN_COOKIE: Final = "spoolmq_login"
LOGIN_PATH: Final = "/admin/login"
HOME: Final = "/admin/"
_LOGIN_FORM_TTL_S: Final = 900
_MAX_FORM_BYTES: Final = 16 * 1024

router = APIRouter(include_in_schema=False)

_PAGE = Environment(autoescape=True).from_string(
    """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>spoolmq — log in</title>
<style>
body { font-family: system-ui, sans-serif; max-width: 26rem; margin: 4rem auto; padding: 0 1rem; }
label, input, button { display: block; width: 100%; box-sizing: border-box; }
input { margin: .3rem 0 1rem; padding: .5rem; font-family: monospace; }
button { padding: .5rem; }
.error { color: #a40000; border: 1px solid #a40000; padding: .5rem; margin-bottom: 1rem; }
</style>
</head>
<body>
<h1>spoolmq admin</h1>
{% if error %}<p class="error" role="alert" id="login-error">{{ error }}</p>{% endif %}
<form method="post" action="{{ action }}">
<input type="hidden" name="csrf_token" value="{{ csrf }}">
<input type="hidden" name="next" value="{{ next }}">
<label for="token">Admin token</label>
<input type="password" id="token" name="token" autocomplete="current-password" required autofocus>
<button type="submit">Log in</button>
</form>
</body>
</html>
"""
)


def _security(request: Request) -> Security:
    security: Security = request.app.state.security
    return security


def _secure(request: Request, security: Security) -> bool:
    return security.options.secure_cookies or is_https(request.scope)


def safe_next(value: str | None) -> str:
    """Where to go after logging in: a path under /admin on this server, else /admin/."""
    if not value or "\\" in value or any(c < " " for c in value):
        return HOME
    parts = urlsplit(value)
    if parts.scheme or parts.netloc or not value.startswith("/admin") or value.startswith("//"):
        return HOME
    return value


def _form_page(request: Request, next_url: str, error: str | None, status: int) -> Response:
    csrf = new_secret()
    html = _PAGE.render(action=LOGIN_PATH, csrf=csrf, next=next_url, error=error)
    response = HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})
    secure = _secure(request, _security(request))
    response.raw_headers.append(
        set_cookie(LOGIN_COOKIE, csrf, secure=secure, max_age=_LOGIN_FORM_TTL_S, path=LOGIN_PATH)
    )
    return response


@router.get(LOGIN_PATH)
async def login_form(request: Request) -> Response:
    if not _security(request).auth_enabled:
        return RedirectResponse(HOME, status_code=303)
    return _form_page(request, safe_next(request.query_params.get("next")), None, 200)


@router.post(LOGIN_PATH)
async def login(request: Request) -> Response:
    security = _security(request)
    if not security.auth_enabled:
        return RedirectResponse(HOME, status_code=303)
    fields = _form_fields(await request.body())
    next_url = safe_next(_first(fields, "next"))
    expected = request_cookies(request.scope).get(LOGIN_COOKIE)
    if not tokens_match(expected, _first(fields, CSRF_FIELD)):
        return _form_page(request, next_url, "The form expired. Please try again.", 403)
    registry = security.registry
    assert registry is not None
    principal = registry.authenticate(_first(fields, "token") or "")
    if principal is None:
        await _audit(request, security, "-", 401)
        return _form_page(request, next_url, "That token is not valid.", 401)
    if not principal.admin:
        await _audit(request, security, principal.name, 403)
        error = f"The token {principal.name!r} is not an admin token."
        return _form_page(request, next_url, error, 403)
    session_id, _ = security.sessions.open(principal)
    response = RedirectResponse(next_url, status_code=303)
    secure = _secure(request, security)
    max_age = int(security.sessions.ttl_s)
    response.raw_headers.append(
        set_cookie(SESSION_COOKIE, session_id, secure=secure, max_age=max_age)
    )
    response.raw_headers.append(clear_cookie(LOGIN_COOKIE, secure=secure, path=LOGIN_PATH))
    await _audit(request, security, principal.name, 303)
    return response


@router.post("/admin/logout")
async def logout(request: Request) -> Response:
    security = _security(request)
    if not security.auth_enabled:
        return RedirectResponse(HOME, status_code=303)
    security.sessions.close(request_cookies(request.scope).get(SESSION_COOKIE))
    response = RedirectResponse(LOGIN_PATH, status_code=303)
    response.raw_headers.append(clear_cookie(SESSION_COOKIE, secure=_secure(request, security)))
    return response


def _form_fields(body: bytes) -> dict[str, list[str]]:
    if len(body) > _MAX_FORM_BYTES:
        return {}
    return parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)


def _first(fields: dict[str, list[str]], name: str) -> str | None:
    values = fields.get(name)
    return values[0] if values else None


async def _audit(request: Request, security: Security, who: str, status: int) -> None:
    request_id = request.scope.get("state", {}).get("request_id", "")
    record = AuditRecord(utc_now(), who, "adminLogin", LOGIN_PATH, status, request_id)
    await asyncio.to_thread(security.audit.write, record)

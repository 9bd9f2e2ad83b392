"""Admin browser sessions and CSRF tokens.

* Logging in on ``/admin/login`` with an admin token opens a server-side session; the
  browser holds only its random id, in the ``spoolmq_session`` cookie (HttpOnly,
  SameSite=Strict, Secure over https). Sessions live in memory: a restart logs everyone out.
* Every state-changing ``/admin`` request carries a CSRF token, in the ``csrf_token`` form
  field or the ``X-CSRF-Token`` header. With sessions it is the session's own token
  (synchronizer token); without an auth file it must equal the ``spoolmq_csrf`` cookie
  (double submit). Templates write it with the Jinja2 global :func:`csrf_token`.
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qs

from jinja2 import pass_context
from jinja2.runtime import Context
from starlette.requests import cookie_parser
from starlette.types import Scope

from app.security.principals import Principal

SESSION_COOKIE: Final = "spoolmq_session"
CSRF_COOKIE: Final = "spoolmq_csrf"
CSRF_FIELD: Final = "csrf_token"
CSRF_HEADER: Final = b"x-csrf-token"
STATE_KEY: Final = "csrf_token"
"""``scope["state"]`` key (``request.state.csrf_token``) of the current request's token."""

_MULTIPART_FIELD: Final = re.compile(
    rb'name="' + CSRF_FIELD.encode() + rb'"\r\n(?:[^\r\n]+\r\n)*\r\n([^\r\n]*)\r\n'
)


def new_secret() -> str:
    return secrets.token_urlsafe(32)


@dataclass(slots=True)
class Session:
    """One logged-in browser."""

    principal: Principal
    csrf_token: str
    expires_at: float


class SessionStore:
    """Sessions by id, each for ``ttl_s`` seconds; the oldest go first beyond ``max_sessions``."""

    def __init__(
        self,
        ttl_s: float,
        max_sessions: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self._max = max_sessions
        self._clock = clock
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def open(self, principal: Principal) -> tuple[str, Session]:
        while len(self._sessions) >= self._max:
            del self._sessions[next(iter(self._sessions))]
        session_id = new_secret()
        session = Session(principal, new_secret(), self._clock() + self.ttl_s)
        self._sessions[session_id] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._sessions.get(session_id)
        if session is not None and session.expires_at <= self._clock():
            del self._sessions[session_id]
            return None
        return session

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)


# ==================================================================== cookies


def request_cookies(scope: Scope) -> dict[str, str]:
    for name, value in scope["headers"]:
        if name == b"cookie":
            return cookie_parser(value.decode("latin-1"))
    return {}


def is_https(scope: Scope) -> bool:
    return scope.get("scheme") == "https"


def set_cookie(
    name: str, value: str, *, secure: bool, max_age: int | None = None, path: str = "/"
) -> tuple[bytes, bytes]:
    """A ``Set-Cookie`` header: HttpOnly, SameSite=Strict, Secure when asked."""
    parts = [f"{name}={value}", f"Path={path}", "HttpOnly", "SameSite=Strict"]
    if max_age is not None:
        parts.append(f"Max-Age={max_age}")
    if secure:
        parts.append("Secure")
    return b"set-cookie", "; ".join(parts).encode("latin-1")


def clear_cookie(name: str, *, secure: bool, path: str = "/") -> tuple[bytes, bytes]:
    return set_cookie(name, "", secure=secure, max_age=0, path=path)


# ==================================================================== CSRF


def tokens_match(expected: str | None, given: str | None) -> bool:
    """Constant-time comparison; an empty or missing token never matches."""
    if not expected or not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def csrf_from_header(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == CSRF_HEADER:
            return bytes(value).decode("latin-1")
    return None


def csrf_from_body(content_type: str, body: bytes) -> str | None:
    """The ``csrf_token`` field of a urlencoded or multipart form body."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "application/x-www-form-urlencoded":
        try:
            values = parse_qs(body.decode("utf-8"), keep_blank_values=True).get(CSRF_FIELD)
        except UnicodeDecodeError:
            return None
        return values[0] if values else None
    if media == "multipart/form-data":
        found = _MULTIPART_FIELD.search(body)
        return found.group(1).decode("latin-1") if found else None
    return None


def is_form(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ("application/x-www-form-urlencoded", "multipart/form-data")


@pass_context
def csrf_token(context: Context) -> str:
    """Jinja2 global: the CSRF token of the request being rendered (``{{ csrf_token() }}``)."""
    request: Any = context.get("request")
    if request is None:
        return ""
    token = request.scope.get("state", {}).get(STATE_KEY, "")
    return str(token)

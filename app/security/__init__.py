"""Authentication, authorization, quotas and the audit log (issue 8).

:func:`install_security` wires it into an app: it reads the auth file, adds the login
routes and :class:`~app.security.middleware.SecurityMiddleware`, and gives the admin
templates their ``csrf_token`` global. See the README's Security section for what is
protected and how.
"""

from __future__ import annotations

from fastapi import FastAPI

from app.routes.table import RouteTable
from app.security import login
from app.security.bind import UnsafeBindError, check_bind, check_ha_bind, is_loopback
from app.security.guard import Security
from app.security.middleware import SecurityMiddleware
from app.security.sessions import csrf_token
from app.security.tokens import (
    AuthFileError,
    entry_toml,
    hash_token,
    load_auth_file,
    new_token,
    replica_keys,
)
from app.settings import Settings

__all__ = [
    "AuthFileError",
    "Security",
    "SecurityMiddleware",
    "UnsafeBindError",
    "check_bind",
    "check_ha_bind",
    "csrf_token",
    "entry_toml",
    "hash_token",
    "install_security",
    "is_loopback",
    "load_auth_file",
    "new_token",
    "replica_keys",
]


def install_security(app: FastAPI, settings: Settings, routes: RouteTable) -> Security:
    """Protect ``app``; call it before the routers are included and before the outer
    middleware is added (so the login routes come first and the request id wraps this).

    Raises AuthFileError when the auth file cannot be read or is not valid.
    """
    security = Security.from_settings(settings)
    app.state.security = security
    app.include_router(login.router)
    app.add_middleware(
        SecurityMiddleware, security=security, routes=routes, broker=app.state.broker
    )
    _provide_csrf_global()
    return security


def _provide_csrf_global() -> None:
    """The admin pages' templates write ``csrf_token`` into every state-changing form."""
    try:
        from app.admin.rendering import templates
    except ImportError:  # pragma: no cover - a build without the admin pages
        return
    templates.env.globals["csrf_token"] = csrf_token

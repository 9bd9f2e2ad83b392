"""Read-only slaves: every write request answers 421 NOT_MASTER, naming the master.

A write is any state-changing method under ``/v1/`` (send, batch, send-back, offset
commits, topic and group changes, POP receive and ack, redrive, reset), a state-changing
admin form, and a group pull that commits as it reads (``auto_commit=true``). Reads —
pulls, lookups, queues, offsets, admin pages — go through. The check is one attribute
read on a master. The OpenAPI document gives each write its 421 (:mod:`app.problem_codes`).
"""

from __future__ import annotations

import re
from typing import Final

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.errors import not_master_response
from services.errors import NotMasterError
from services.ha import ReplicaRole

_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
_ADMIN_SAFE_POSTS: Final = ("/admin/login", "/admin/logout")
_GROUP_PULL: Final = re.compile(r"^/v1/groups/[^/]+/topics/[^/]+/messages$")
_AUTO_COMMIT: Final = re.compile(rb"(?:^|&)auto_commit=(?:true|1)(?:&|$)", re.IGNORECASE)


def is_write(scope: Scope) -> bool:
    """Whether a request changes state (see the module docstring)."""
    method = scope["method"]
    path: str = scope["path"]
    if method in _SAFE_METHODS:
        return (
            method == "GET"
            and _GROUP_PULL.match(path) is not None
            and _AUTO_COMMIT.search(scope.get("query_string", b"")) is not None
        )
    if path.startswith("/v1/"):
        return True
    return (
        path.startswith("/admin/")
        and path not in _ADMIN_SAFE_POSTS
        and not path.endswith("/preview")
    )


class ReplicaGuardMiddleware:
    """Answers writes on a slave with 421 before any route runs."""

    def __init__(self, app: ASGIApp, replica: ReplicaRole) -> None:
        self.app = app
        self.replica = replica

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.replica.accepts_writes and is_write(scope):
            try:
                self.replica.check_writable()
            except NotMasterError as exc:
                response = not_master_response(Request(scope), exc)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

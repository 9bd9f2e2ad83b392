"""The FastAPI application class: an HTTP request goes straight to the HTTP shell.

Around the app's own middleware FastAPI puts three layers that every request walks:
Starlette's ``ServerErrorMiddleware`` (a 500 for an exception raised before an answer
started; one raised after it, re-raised), FastAPI's exception telemetry (a no-op with
telemetry off) and its body-limit layer (a pass-through unless the app or a parent app sets a
``max_body_size``). The outermost layer of this app, :class:`~app.middleware.
HttpShellMiddleware`, answers every exception raised before an answer started with its own
500 problem and re-raises only the ones after, so for an HTTP request those three layers do
nothing: :class:`SpoolmqApp` hands such a request to the shell at once. Anything else —
lifespan, websockets, telemetry on, a body limit, debug, a stack whose outermost middleware
is not the shell — goes FastAPI's way.
"""

from __future__ import annotations

from typing import Final

from fastapi import FastAPI
from fastapi._body_limit import AppBodyLimitMiddleware
from fastapi.telemetry._asgi import ExceptionTelemetryMiddleware
from starlette.middleware.body_limit import MAX_BODY_SIZE_SCOPE_KEY
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from app.middleware import HttpShellMiddleware

_OUTER_LAYERS: Final = (ServerErrorMiddleware, ExceptionTelemetryMiddleware, AppBodyLimitMiddleware)


class SpoolmqApp(FastAPI):
    """FastAPI, with HTTP requests handed to the HTTP shell past the layers that would do
    nothing for them (see the module)."""

    _shell: ASGIApp | None = None
    _shell_found = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        shell = self._shell if self._shell_found else self._find_shell()
        if (
            shell is None
            or scope["type"] != "http"
            or "fastapi.telemetry" in scope
            or MAX_BODY_SIZE_SCOPE_KEY in scope
        ):
            await super().__call__(scope, receive, send)
            return
        if self.root_path:
            scope["root_path"] = self.root_path
        scope["app"] = self
        await shell(scope, receive, send)

    def _find_shell(self) -> ASGIApp | None:
        """The HTTP shell when the layers above it are the three this class skips and they
        are configured to do nothing for an HTTP request that the shell answers; else None."""
        if self.middleware_stack is None:
            self.middleware_stack = self.build_middleware_stack()
        self._shell_found = True
        if self.debug or self.max_body_size is not None or self._native_telemetry.enabled():
            return None
        layer = self.middleware_stack
        for expected in _OUTER_LAYERS:
            if type(layer) is not expected:
                return None
            layer = layer.app
        if type(layer) is not HttpShellMiddleware:
            return None
        self._shell = layer
        return layer

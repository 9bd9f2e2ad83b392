"""The uvicorn server spoolmq runs on: one worker, uvloop + httptools, graceful shutdown.

On SIGTERM or SIGINT the server stops accepting connections, answers every parked long-poll
at once (instead of waiting out up to 30 s of wait_ms), lets requests in flight finish, then
runs the app's lifespan shutdown: persist offsets and configs, close the store.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Callable, Generator
from typing import Final

import uvicorn
from fastapi import FastAPI

from app.settings import Settings

HANDLED_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


class SpoolServer(uvicorn.Server):
    """uvicorn.Server that wakes long-polls first on shutdown and exits 0 after a signal."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises the signal after a graceful shutdown, which would end the
        # process with -15 or a KeyboardInterrupt; a clean shutdown exits 0 instead.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def build_server(app: FastAPI, settings: Settings) -> SpoolServer:
    """A server for ``app`` on the settings' host and port."""
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        ws="none",
        lifespan="on",
        log_level=settings.log_level,
        access_log=settings.access_log,
        timeout_graceful_shutdown=max(1, round(settings.graceful_shutdown_s)),
        server_header=False,
        proxy_headers=False,
    )
    return SpoolServer(config, on_shutdown=app.state.broker.begin_shutdown)

"""What the worker pool's tests run in its workers (:mod:`tests.app.server.test_workers`): a
module of its own that imports little, since every worker process imports it afresh."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from app.server import Server, listen_socket
from app.server.workers import Restarts, WorkerPool

QUICK_RESTARTS = Restarts(first_delay_s=0.05, max_delay_s=0.2, start_grace_s=600, max_failures=3)
"""Restarts at once; any death counts as one at start, however slowly a worker imports."""


def pid_worker(index: int, port: int, marks: str) -> None:
    """Answers its slot and pid; ``/slow`` 1 s after it has left a file in ``marks`` (a
    request in progress when a signal comes)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body", False):
            pass
        if scope["path"] == "/slow":
            (Path(marks) / "slow").touch()
            await asyncio.sleep(1.0)
        body = b"%d %d" % (index, os.getpid())
        headers = [(b"content-length", b"%d" % len(body))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    sock = listen_socket("127.0.0.1", port, reuse_port=True)
    Server(app).run([sock])


def failing_worker(index: int, port: int) -> None:
    """Dies at once, as a worker that cannot start."""
    sys.exit(3)


def run_pool(port: int, count: int, marks: str) -> int:
    """The pool of ``count`` :func:`pid_worker` (run in a process of its own by the tests)."""
    logging.basicConfig(level="INFO")
    return WorkerPool(count, pid_worker, (port, marks), QUICK_RESTARTS).run()

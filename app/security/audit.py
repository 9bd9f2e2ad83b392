"""The audit log: one JSON line per admin action, appended under a lock.

Each line holds ``when`` (UTC, ISO 8601), ``who`` (the token's name, ``anonymous`` without
an auth file), ``what`` (the operationId, or ``POST /admin/...`` for an admin page),
``target`` (``topic:NAME``, ``group:NAME``, or the page's path), ``result`` (the HTTP
status) and ``request_id``. Lines are written with one ``write()`` on a file opened for
appending, under a thread lock and an exclusive ``flock``, so they never interleave.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One admin action."""

    when: str
    who: str
    what: str
    target: str
    result: int
    request_id: str


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def target_of(path_params: Mapping[str, Any], fallback: str) -> str:
    """``group:G topic:T`` from the route's path parameters, else ``fallback``."""
    parts = [f"{name}:{path_params[name]}" for name in ("group", "topic") if name in path_params]
    return " ".join(parts) or fallback


class AuditLog:
    """Appends records to ``path`` (its directory is created when missing)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, record: AuditRecord) -> None:
        """Append one line; a failure is logged, never raised (the action already happened)."""
        line = orjson.dumps(asdict(record)) + b"\n"
        with self._lock:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    os.write(fd, line)
                finally:
                    os.close(fd)  # closing releases the flock
            except OSError as exc:
                log.error("could not write the audit log %s: %s (%s)", self.path, exc, line)

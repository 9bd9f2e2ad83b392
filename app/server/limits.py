"""What the HTTP server allows a client: deadlines, sizes, and the keep-alive time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

BODY_STALLED: Final = "spoolmq.body_stalled"
"""Scope key the server sets (then wakes the pending body read, which returns no bytes and
more to come) when a request body stops arriving for ``body_timeout_s``: the app answers 408
(:class:`app.middleware.HttpShellMiddleware`) and the connection is closed after it."""


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """How long and how much a client may take.

    * headers: the request line and headers must be complete within ``header_timeout_s`` of
      the request's first byte (or of the connection's start) — else 408 and close — and
      fit in ``max_header_bytes`` — else 431 and close;
    * body: it may pause for at most ``body_timeout_s`` at a time (a pause while the server
      itself stopped reading does not count), see :data:`BODY_STALLED`;
    * an idle keep-alive connection is closed after ``keep_alive_timeout_s``.
    """

    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0
    max_header_bytes: int = 64 * 1024
    graceful_shutdown_s: float = 10.0
    """How long a shutdown waits for requests in progress before it cancels them."""
    access_log: bool = False
    """Log every answered request at INFO on the ``spoolmq.access`` logger."""

"""The HTTP/1.1 server spoolmq's broker and proxy run on: ASGI apps over asyncio and httptools,
with deadlines and size caps for slow clients, one write per small answer, and a graceful
shutdown (:mod:`app.server.serve`)."""

from app.server.exchange import (
    BodyStalledError,
    BodyTooLargeError,
    ClientGoneError,
    Exchange,
    Handler,
    WireFace,
)
from app.server.limits import BODY_STALLED, ServerLimits
from app.server.serve import ListenError, ReusePortError, Server, listen_socket

__all__ = [
    "BODY_STALLED",
    "BodyStalledError",
    "BodyTooLargeError",
    "ClientGoneError",
    "Exchange",
    "Handler",
    "ListenError",
    "ReusePortError",
    "Server",
    "ServerLimits",
    "WireFace",
    "listen_socket",
]

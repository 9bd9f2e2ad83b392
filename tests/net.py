"""Loopback ports for the servers tests start."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different TCP ports free on 127.0.0.1 right now, for one server that listens
    on several: each is held until all are picked (two calls of :func:`free_port` in a row may
    give the same port, and a server given it twice fails to start)."""
    with ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports

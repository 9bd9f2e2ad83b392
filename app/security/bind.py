"""Safe by default: without an auth file the server listens on loopback only.

>>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost")
(True, True, True)
>>> is_loopback("0.0.0.0"), is_loopback(""), is_loopback("example.org")
(False, False, False)
"""

from __future__ import annotations

import ipaddress


class UnsafeBindError(Exception):
    """Listening beyond loopback with nobody authenticated."""


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``; any other name counts as reachable from outside."""
    name = host.strip().strip("[]").lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_bind(host: str, *, auth_enabled: bool, allow_anonymous: bool) -> None:
    """Raise UnsafeBindError when ``host`` is not loopback, there is no auth file and
    anonymous access was not allowed explicitly."""
    if auth_enabled or allow_anonymous or is_loopback(host):
        return
    raise UnsafeBindError(
        f"refusing to listen on {host!r} without authentication: anyone who can reach it "
        "could read, write and delete every topic. Give --auth-file FILE (tokens: spoolmq "
        "token create), or --allow-anonymous to open it to everyone on purpose, or listen "
        "on loopback (--host 127.0.0.1)."
    )

"""Safe by default: without an auth file the server listens on loopback only.

What may listen beyond loopback without ``--allow-anonymous``:

- the HTTP API with an auth file (every request presents a token; give it ``--tls-cert``
  too, or the tokens cross the network in clear);
- the HA port with an auth file (a slave proves an admin token before any byte of the
  CommitLog is sent) **and** ``--tls-cert`` (the CommitLog, every message, is encrypted on
  the wire, and slaves need a certificate of ``--tls-ca``).

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


def check_ha_bind(
    host: str, *, auth_enabled: bool, tls_enabled: bool, allow_anonymous: bool
) -> None:
    """Raise UnsafeBindError when the HA port would listen beyond loopback without both
    slave authentication (an auth file) and TLS, and anonymous access was not allowed."""
    if (auth_enabled and tls_enabled) or allow_anonymous or is_loopback(host):
        return
    missing = " and ".join(
        what
        for what, given in (("--auth-file", auth_enabled), ("--tls-cert/--tls-key", tls_enabled))
        if not given
    )
    raise UnsafeBindError(
        f"refusing to stream the CommitLog on {host!r} without {missing}: anyone who can "
        "reach the HA port (or watch the network) could read every message. Give an auth "
        "file (slaves prove an admin token) and a certificate (the stream is encrypted, "
        "slaves need a certificate of --tls-ca), or --allow-anonymous to open it on purpose, "
        "or keep --ha-listen on loopback."
    )

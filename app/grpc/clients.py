"""The clients that talk to the gRPC face: who they are, which group, which language and version.

Kept in memory, as RocketMQ's proxy keeps its producer and consumer managers: a client is
listed from its first Heartbeat or Telemetry settings on, and dropped when it says it
terminates (NotifyClientTermination) or has not been heard of for :data:`CLIENT_EXPIRY_S`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Final

CLIENT_EXPIRY_S: Final = 120.0
"""A client silent this long is gone (clients heartbeat every 10 s)."""


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """One client as the face last heard of it."""

    client_id: str
    client_type: str = ""  # PRODUCER, SIMPLE_CONSUMER, PUSH_CONSUMER, ...
    group: str = ""  # a consumer's group; "" for a producer
    language: str = ""
    version: str = ""
    last_seen: float = 0.0  # time.monotonic()


class ClientTable:
    """The clients by id."""

    def __init__(self, expiry_s: float = CLIENT_EXPIRY_S) -> None:
        self._clients: dict[str, ClientInfo] = {}
        self._expiry_s = expiry_s

    def seen(
        self,
        client_id: str,
        *,
        client_type: str = "",
        group: str = "",
        language: str = "",
        version: str = "",
    ) -> ClientInfo:
        """Record that ``client_id`` spoke; what it says now replaces what it said before,
        what it leaves out (``""``) is kept."""
        known = self._clients.get(client_id) or ClientInfo(client_id)
        info = replace(
            known,
            client_type=client_type or known.client_type,
            group=group or known.group,
            language=language or known.language,
            version=version or known.version,
            last_seen=time.monotonic(),
        )
        self._clients[client_id] = info
        return info

    def terminated(self, client_id: str) -> None:
        """The client said goodbye."""
        self._clients.pop(client_id, None)

    def clients(self) -> list[ClientInfo]:
        """The live clients by id (the silent ones are dropped first)."""
        horizon = time.monotonic() - self._expiry_s
        for client_id in [c.client_id for c in self._clients.values() if c.last_seen < horizon]:
            del self._clients[client_id]
        return sorted(self._clients.values(), key=lambda c: c.client_id)

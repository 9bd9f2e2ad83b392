"""The clients that talk to the gRPC face: who they are, which group, which language and version.

Kept in memory, as RocketMQ's proxy keeps its producer and consumer managers: a client is
listed from its first Heartbeat or Telemetry settings on, and dropped when it says it
terminates (NotifyClientTermination) or has not been heard of for :data:`CLIENT_EXPIRY_S`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:  # the admin pages read the table on an installation without the grpc extra
    import grpc

    Context = grpc.aio.ServicerContext[Any, Any]

CLIENT_EXPIRY_S: Final = 120.0
"""A client silent this long is gone (clients heartbeat every 10 s)."""
CLIENT_ID: Final = "x-mq-client-id"
LANGUAGE: Final = "x-mq-language"
CLIENT_VERSION: Final = "x-mq-client-version"
"""The metadata every call of a RocketMQ 5 client carries."""


@dataclass(frozen=True, slots=True)
class ClientInfo:
    """One client as the face last heard of it."""

    client_id: str
    client_type: str = ""  # PRODUCER, SIMPLE_CONSUMER, PUSH_CONSUMER, ...
    group: str = ""  # a consumer's group; "" for a producer
    language: str = ""
    version: str = ""
    last_seen: float = 0.0  # time.monotonic()
    address: str = ""  # where it last called from (host:port)


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
        address: str = "",
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
            address=address or known.address,
        )
        self._clients[client_id] = info
        return info

    def heard(
        self,
        context: Context,
        client_type: str,
        group: str,
        language: str = "",
        version: str = "",
    ) -> None:
        """Record the caller of ``context`` (by the client id its metadata names, if any);
        its language and version from the metadata unless given."""
        client_id = metadata(context, CLIENT_ID)
        if client_id:
            self.seen(
                client_id,
                client_type=client_type,
                group=group,
                language=language or metadata(context, LANGUAGE),
                version=version or metadata(context, CLIENT_VERSION),
                address="{}:{}".format(*peer(context)),
            )

    def heard_settings(self, context: Context, settings: Any) -> str:
        """Record the client of a Telemetry settings command; its consumer group ("" for a
        producer)."""
        from app.grpc.protocol import definition  # only a face calls this: the extra is there

        group: str = settings.subscription.group.name if settings.HasField("subscription") else ""
        self.heard(
            context,
            definition.ClientType.Name(settings.client_type),
            group,
            language=definition.Language.Name(settings.user_agent.language),
            version=settings.user_agent.version,
        )
        return group

    def terminated(self, client_id: str) -> None:
        """The client said goodbye."""
        self._clients.pop(client_id, None)

    def clients(self) -> list[ClientInfo]:
        """The live clients by id (the silent ones are dropped first)."""
        horizon = time.monotonic() - self._expiry_s
        for client_id in [c.client_id for c in self._clients.values() if c.last_seen < horizon]:
            del self._clients[client_id]
        return sorted(self._clients.values(), key=lambda c: c.client_id)


def metadata(context: Context, name: str) -> str:
    """The value of the call's metadata ``name``; "" when it has none."""
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode()
    return ""


def peer(context: Context) -> tuple[str, int]:
    """The client's address (``ipv4:127.0.0.1:5000``) as (host, port); loopback when the
    transport names none."""
    kind, _, address = context.peer().partition(":")
    host, _, port = address.rpartition(":")
    if kind not in ("ipv4", "ipv6") or not port.isdigit():
        return ("127.0.0.1", 0)
    return (host.strip("[]"), int(port))

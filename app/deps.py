"""Dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Final

from fastapi import Depends, Request
from starlette.requests import ClientDisconnect

from app.settings import Settings
from services import CURRENT_CONSUMER, Broker, Consumer
from services.cluster import ClusterMember


async def get_broker(request: Request) -> Broker:
    """The app's broker (created by ``create_app``); async, so no worker thread is used."""
    broker: Broker = request.app.state.broker
    return broker


BrokerDep = Annotated[Broker, Depends(get_broker)]


def born_host(request: Request) -> tuple[str, int]:
    """The sender's address as a record's born host (127.0.0.1:0 when the server has none)."""
    client = request.client
    return (client.host, client.port) if client else ("127.0.0.1", 0)


async def app_settings(request: Request) -> Settings:
    """The settings the app was built with."""
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(app_settings)]


async def cluster_member(request: Request) -> ClusterMember | None:
    """The broker's cluster membership; None when it runs alone."""
    member: ClusterMember | None = request.app.state.cluster
    return member


ClusterDep = Annotated[ClusterMember | None, Depends(cluster_member)]


def header(request: Request, name: bytes) -> str:
    """The first value of header ``name`` (lower case) as text, "" when there is none: one
    pass over the raw headers, no header object made."""
    for key, value in request.scope["headers"]:
        if key == name:
            return bytes(value).decode("latin-1")
    return ""


BODY_READ: Final = "spoolmq.body"
"""The scope's key for a request body a server's wire face read before the endpoint ran
(:mod:`app.routes.wire`): the endpoint's :func:`read_body` takes it from there."""


async def read_body(request: Request) -> bytes:
    """The request's body, read once straight from its ASGI ``receive`` (``request.body()``
    goes through an async generator, a noticeable part of a small send), or taken from the
    scope where a wire face put it: for a route that reads its body exactly once.
    ClientDisconnect when the client went away first."""
    read: bytes | None = request.scope.pop(BODY_READ, None)
    if read is not None:
        return read
    chunks: list[bytes] = []
    receive = request.receive
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def disconnect_watch(request: Request) -> Callable[[], Awaitable[None]]:
    """A factory of awaitables that finish when the client of ``request`` disconnects.

    Long-polls park on it too, so a client that goes away leaves no waiter behind.
    """

    async def wait_for_disconnect() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                return

    return wait_for_disconnect


def note_consumer(request: Request) -> None:
    """Name the request's consumer for a message trace (its token's name, its address, its
    ``X-Client-Id``): made only if a traced step asks for it."""

    def consumer() -> Consumer:
        client = request.client
        state = request.scope.get("state") or {}
        principal = state.get("principal")
        return Consumer(
            token=principal if isinstance(principal, str) else None,
            address=f"{client.host}:{client.port}" if client else None,
            client_id=header(request, b"x-client-id") or None,
        )

    CURRENT_CONSUMER.set(consumer)

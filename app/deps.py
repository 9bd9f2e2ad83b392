"""Dependencies shared by the routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, Request

from app.settings import Settings
from services import Broker
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

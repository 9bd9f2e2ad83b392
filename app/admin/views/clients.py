"""Clients: who talks to this broker's RocketMQ 5 gRPC face — each client's id, type, group,
language and version, when it was last heard of and from where — as its client table keeps
them (:class:`~app.grpc.clients.ClientTable`: from Heartbeat and Telemetry, dropped on
NotifyClientTermination or after a silence). A broker without ``--grpc-listen`` says so."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.problems import AdminRoute
from app.admin.rendering import render
from app.grpc.clients import ClientInfo, ClientTable

router = APIRouter(route_class=AdminRoute)


@router.get("/clients", name="admin-clients")
async def clients_page(request: Request) -> Response:
    table = client_table(request)
    context = {
        "title": "Clients",
        "nav": "clients",
        "face_on": table is not None,
        "clients": [client_row(c) for c in table.clients()] if table is not None else [],
    }
    return render(request, "clients.html", context)


def client_table(request: Request) -> ClientTable | None:
    """The gRPC face's client table; None when the face is off."""
    face_server = getattr(request.app.state, "grpc", None)
    if face_server is None:
        return None
    table: ClientTable = face_server.face.clients
    return table


def client_row(client: ClientInfo) -> dict[str, Any]:
    """One client as the page shows it: its type in words, how long ago it was heard of."""
    return {
        "client_id": client.client_id,
        "client_type": client.client_type.replace("_", " ").lower() or "—",
        "group": client.group or "—",
        "language": client.language or "—",
        "version": client.version or "—",
        "seen_s_ago": max(0.0, time.monotonic() - client.last_seen),
        "address": client.address or "—",
    }

"""RocketMQ 5's gRPC face: ``apache.rocketmq.v2.MessagingService`` for the official clients.

Optional (the ``grpc`` extra) and off unless ``--grpc-listen`` is given: :func:`grpc_server`
builds the server over the app's broker, which the app's lifespan starts and stops.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.security.tokens import load_auth_file
from services import Broker

if TYPE_CHECKING:
    from app.grpc.server import GrpcServer


class GrpcExtraMissingError(RuntimeError):
    """``--grpc-listen`` on an installation without the grpc extra."""


def grpc_server(
    broker: Broker,
    listen: str,
    *,
    broker_name: str,
    max_body_bytes: int,
    auth_file: Path | None = None,
) -> GrpcServer:
    """The face's server, imported only when asked for: serving HTTP alone needs none of it.
    With ``auth_file`` every call is signed by one of its tokens (:mod:`app.grpc.auth`)."""
    try:
        from app.grpc.server import GrpcServer
        from app.grpc.service import MessagingFace
    except ImportError as exc:
        raise GrpcExtraMissingError(
            f"--grpc-listen needs the grpc extra (pip install 'spoolmq[grpc]'): {exc}"
        ) from exc
    tokens = None if auth_file is None else load_auth_file(auth_file)
    face = MessagingFace(
        broker, broker_name=broker_name, max_body_bytes=max_body_bytes, tokens=tokens
    )
    return GrpcServer(face, listen)

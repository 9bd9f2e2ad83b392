"""RocketMQ 5's gRPC face: ``apache.rocketmq.v2.MessagingService`` for the official clients.

Optional (the ``grpc`` extra) and off unless ``--grpc-listen`` is given: :func:`grpc_server`
builds the server over the app's broker, which the app's lifespan starts and stops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from services import Broker

if TYPE_CHECKING:
    from app.grpc.server import GrpcServer


class GrpcExtraMissingError(RuntimeError):
    """``--grpc-listen`` on an installation without the grpc extra."""


def grpc_server(
    broker: Broker, listen: str, *, broker_name: str, max_body_bytes: int
) -> GrpcServer:
    """The face's server, imported only when asked for: serving HTTP alone needs none of it."""
    try:
        from app.grpc.server import GrpcServer
    except ImportError as exc:
        raise GrpcExtraMissingError(
            f"--grpc-listen needs the grpc extra (pip install 'spoolmq[grpc]'): {exc}"
        ) from exc
    return GrpcServer(broker, listen, broker_name=broker_name, max_body_bytes=max_body_bytes)

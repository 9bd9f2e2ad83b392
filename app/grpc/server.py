"""The gRPC server of RocketMQ 5's face: grpcio's asyncio server on the app's event loop.

It serves :class:`~app.grpc.service.MessagingFace` on its own port (``--grpc-listen``), in the
process and over the broker of the HTTP API. Only the calls the face implements are
registered; grpcio answers any other with ``UNIMPLEMENTED``.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import grpc

from app.grpc.protocol import SERVICE_NAME, service
from app.grpc.service import MessagingFace, answering_failures
from services import Broker
from services.ha import split_host_port

log = logging.getLogger(__name__)

STOP_GRACE_S: Final = 5.0
"""How long a stop lets calls in flight finish."""


class GrpcServer:
    """The face's server: :meth:`start` binds and serves, :meth:`stop` ends it."""

    def __init__(
        self, broker: Broker, listen: str, *, broker_name: str, max_body_bytes: int
    ) -> None:
        self.host, self.requested_port = split_host_port(listen)
        self.face = MessagingFace(broker, broker_name=broker_name, max_body_bytes=max_body_bytes)
        self.port = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_handlers(self.face),))
        self.port = server.add_insecure_port(f"{self.host}:{self.requested_port}")
        self.face.serve_at(self.host, self.port)
        await server.start()
        self._server = server
        log.info("RocketMQ 5 gRPC face on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(STOP_GRACE_S)


def _handlers(face: MessagingFace) -> grpc.GenericRpcHandler:
    """The method handlers of the calls the face serves."""
    unary = {
        "QueryRoute": (face.query_route, "QueryRoute"),
        "QueryAssignment": (face.query_assignment, "QueryAssignment"),
        "Heartbeat": (face.heartbeat, "Heartbeat"),
        "NotifyClientTermination": (face.notify_client_termination, "NotifyClientTermination"),
        "SendMessage": (face.send_message, "SendMessage"),
        "AckMessage": (face.ack_message, "AckMessage"),
        "ChangeInvisibleDuration": (face.change_invisible_duration, "ChangeInvisibleDuration"),
        "ForwardMessageToDeadLetterQueue": (
            face.forward_message_to_dead_letter_queue,
            "ForwardMessageToDeadLetterQueue",
        ),
    }
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        name: grpc.unary_unary_rpc_method_handler(
            answering_failures(call, _message(f"{kind}Response")),
            request_deserializer=_message(f"{kind}Request").FromString,
            response_serializer=_message(f"{kind}Response").SerializeToString,
        )
        for name, (call, kind) in unary.items()
    }
    handlers["ReceiveMessage"] = grpc.unary_stream_rpc_method_handler(
        face.receive_message,
        request_deserializer=service.ReceiveMessageRequest.FromString,
        response_serializer=service.ReceiveMessageResponse.SerializeToString,
    )
    handlers["Telemetry"] = grpc.stream_stream_rpc_method_handler(
        face.telemetry,
        request_deserializer=service.TelemetryCommand.FromString,
        response_serializer=service.TelemetryCommand.SerializeToString,
    )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _message(name: str) -> Any:
    return getattr(service, name)

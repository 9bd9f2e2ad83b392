"""The gRPC server of RocketMQ 5's face: grpcio's asyncio server on the app's event loop.

It serves a face — the broker's :class:`~app.grpc.service.MessagingFace` or the proxy's
:class:`~app.grpc.proxy_face.ProxyMessagingFace` — on its own port (``--grpc-listen``), in the
process of the HTTP API. Every method of ``MessagingService`` has a handler: the face's call of
that name (:meth:`Face.calls`), its errors answered as a status in the call's response, or
``UNIMPLEMENTED`` with a message saying the face does not serve it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final, Protocol

import grpc

from app.grpc.auth import Context
from app.grpc.clients import ClientTable
from app.grpc.protocol import SERVICE_NAME, service
from app.grpc.service import answering_failures, streaming_failures
from services.ha import split_host_port

log = logging.getLogger(__name__)

STOP_GRACE_S: Final = 5.0
"""How long a stop lets calls in flight finish."""


class Face(Protocol):
    """What a server serves: the calls by method name, and where clients reach it."""

    clients: ClientTable

    def calls(self) -> Mapping[str, Callable[..., Any]]: ...

    def serve_at(self, host: str, port: int) -> None: ...


class GrpcServer:
    """``face``'s server: :meth:`start` binds and serves, :meth:`stop` ends it."""

    def __init__(self, face: Face, listen: str) -> None:
        self.face = face
        self.host, self.requested_port = split_host_port(listen)
        self.port = 0
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((method_handlers(self.face.calls()),))
        self.port = server.add_insecure_port(f"{self.host}:{self.requested_port}")
        self.face.serve_at(self.host, self.port)
        await server.start()
        self._server = server
        log.info("RocketMQ 5 gRPC face on %s:%d", self.host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await server.stop(STOP_GRACE_S)


def method_handlers(calls: Mapping[str, Callable[..., Any]]) -> grpc.GenericRpcHandler:
    """A handler for every method of the service: the call of its name in ``calls``, else
    ``UNIMPLEMENTED`` with a message."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for method in service.DESCRIPTOR.services_by_name["MessagingService"].methods:
        response = getattr(service, method.output_type.name)
        shape = {
            "request_deserializer": getattr(service, method.input_type.name).FromString,
            "response_serializer": response.SerializeToString,
        }
        call = calls.get(method.name)
        if call is None:
            handlers[method.name] = _unimplemented(
                method.name, method.client_streaming, method.server_streaming, shape
            )
        elif method.client_streaming:  # Telemetry: the face answers its stream itself
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(call, **shape)
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(
                streaming_failures(call, response), **shape
            )
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                answering_failures(call, response), **shape
            )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def _unimplemented(
    name: str, client_streaming: bool, server_streaming: bool, shape: dict[str, Any]
) -> grpc.RpcMethodHandler[Any, Any]:
    """The handler of a call the face does not serve: ``UNIMPLEMENTED``, saying so."""
    why = f"{name} is not served by this gRPC face"

    async def refuse(request: Any, context: Context) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, why)

    async def refuse_streaming(request: Any, context: Context) -> AsyncIterator[Any]:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, why)
        yield None  # never reached: abort raises

    if client_streaming and server_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse_streaming, **shape)
    if client_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **shape)
    if server_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse_streaming, **shape)
    return grpc.unary_unary_rpc_method_handler(refuse, **shape)

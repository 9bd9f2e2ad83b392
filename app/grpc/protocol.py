"""The protocol of RocketMQ 5's gRPC face: ``apache.rocketmq.v2``, as generated modules.

The modules are the ones ``rocketmq-python-client`` 5.1.2 ships (``rocketmq.grpc_protocol``),
not ones generated here from apache/rocketmq-apis with grpcio-tools: they are the very
definitions the official clients are built with (the same proto revision, field numbers and
enums), they come with the package the ``grpc`` extra installs (nothing is generated or
downloaded at build or run time), and the repository keeps no generated code to re-generate
when the protocol moves. Only the message classes and the enums are used; the face registers
its own method handlers (:mod:`app.grpc.server`), so the generated servicer base is not needed.

The generated modules carry no type information: the names here are typed ``Any``.
"""

from __future__ import annotations

from typing import Any, Final

from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2 as _definition,
)
from rocketmq.grpc_protocol import (
    service_pb2 as _service,
)

definition: Final[Any] = _definition
"""Resources, messages, settings and the enums (``Code``, ``MessageType``, ...)."""
service: Final[Any] = _service
"""The requests and responses of ``MessagingService``."""

SERVICE_NAME: Final = "apache.rocketmq.v2.MessagingService"
"""The full name of the service the clients call."""

Code: Final[Any] = _definition.Code
MessageType: Final[Any] = _definition.MessageType

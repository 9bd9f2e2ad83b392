"""What the gRPC face's tests share: a real ``spoolmq serve --grpc-listen`` and the official
Python client's helpers (its messages, a simple consumer, a receive loop, a raw stub)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import httpx
from rocketmq import (  # type: ignore[import-untyped]
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2,
    service_pb2_grpc,
)

from tests.net import free_port
from tests.serve_process import ServeProcess

DEADLINE_S = 60.0
"""How long a test waits for what it expects (generous: the machine may be busy)."""


class Face:
    """The server, its HTTP client and its gRPC address."""

    def __init__(self, server: ServeProcess, http: httpx.Client, address: str) -> None:
        self.server = server
        self.http = http
        self.address = address

    def config(self, credentials: Credentials | None = None) -> ClientConfiguration:
        return ClientConfiguration(self.address, credentials or Credentials(), request_timeout=10)

    def topic(self, name: str, queues: int = 4) -> str:
        body = {"read_queue_nums": queues, "write_queue_nums": queues}
        assert self.http.put(f"/v1/topics/{name}", json=body).status_code in (200, 201)
        return name


@contextmanager
def serving(store: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Face]:
    """``spoolmq serve --grpc-listen`` on ``store`` with ``args``; killed at the end."""
    port = free_port()
    server = ServeProcess(store, "--grpc-listen", f"127.0.0.1:{port}", *args, env=env)
    try:
        with server.client() as http:
            yield Face(server, http, f"127.0.0.1:{port}")
    finally:
        server.kill()


def consumer_of(
    face: Face,
    group: str,
    topic: str,
    expression: str = "*",
    credentials: Credentials | None = None,
) -> SimpleConsumer:
    consumer = SimpleConsumer(
        face.config(credentials), group, {topic: FilterExpression(expression)}, await_duration=2
    )
    consumer.startup()
    return consumer


def message(topic: str, body: bytes, **fields: object) -> Message:
    out = Message()
    out.topic = topic
    out.body = body
    if "tag" in fields:
        out.tag = fields["tag"]
    if "keys" in fields:
        out.keys = fields["keys"]
    if "group" in fields:
        out.message_group = fields["group"]
    if "deliver_at_s" in fields:
        out.delivery_timestamp = fields["deliver_at_s"]
    for name, value in dict(fields.get("properties", {})).items():  # type: ignore[call-overload]
        out.add_property(name, value)
    return out


def receive_all(
    consumer: SimpleConsumer, count: int, *, ack: bool = True, deadline_s: float = DEADLINE_S
) -> list[Message]:
    """Receive (and ack) until ``count`` messages came, within the deadline."""
    got: list[Message] = []
    deadline = time.monotonic() + deadline_s
    while len(got) < count and time.monotonic() < deadline:
        for received in consumer.receive(16, 30):
            got.append(received)
            if ack:
                consumer.ack(received)
    return got


@contextmanager
def stub(face: Face) -> Iterator[service_pb2_grpc.MessagingServiceStub]:
    """The generated stub on a channel of its own."""
    with grpc.insecure_channel(face.address) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def resource(name: str) -> definition_pb2.Resource:
    return definition_pb2.Resource(name=name)


def queue(topic: str, queue_id: int) -> definition_pb2.MessageQueue:
    return definition_pb2.MessageQueue(topic=resource(topic), id=queue_id)

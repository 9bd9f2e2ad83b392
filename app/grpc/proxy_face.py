"""RocketMQ 5's gRPC face of the proxy: ``apache.rocketmq.v2.MessagingService`` for a cluster.

``spoolmq proxy --grpc-listen HOST:PORT`` serves it beside the HTTP API, in the same process.
Each call is a translation to the proxy's own HTTP operation, asked in the process through the
proxy's app (:class:`AppCaller`: no socket, the same middleware, routing and problem answers),
so a gRPC client gets exactly the HTTP face's rules — the at-most-once send with its retries
across a failover (:mod:`app.proxy.sending`), the POP fan-out over the broker groups and the
ack routed back to the group of each receipt handle (:mod:`app.proxy.pop`). A send carries no
Idempotency-Key of the client's: the proxy keys its own retries of it, and it goes to any group
with a master, so sends go on while a group elects a new one (the client's message id is the
record's ``UNIQ_KEY``, the id its consumers see).

=============================  ==========================================================
QueryRoute                     ``getTopicRoute``: every queue at this face's address
QueryAssignment                the first queue of the route (a receive asks every group)
SendMessage                    ``sendMessages`` (the proxy keys its own retries)
ReceiveMessage                 ``receiveMessages``
AckMessage                     ``ackMessages``
ChangeInvisibleDuration        ``changeInvisibility``
Heartbeat, Telemetry,          the face's client table (:class:`~app.grpc.clients.ClientTable`);
NotifyClientTermination        Telemetry answers the settings (the group's from a master)
=============================  ==========================================================

Every other call of the service (transactions, recall, offsets, the forward to a DLQ, which
the proxy's HTTP API does not offer either) answers ``UNIMPLEMENTED`` with a message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
import orjson
from fastapi import FastAPI

from app.grpc.clients import CLIENT_ID, ClientTable, metadata
from app.grpc.convert import (
    ProtocolError,
    endpoints_of,
    invisible_ms_of,
    millis,
    settings_answer,
    status,
)
from app.grpc.protocol import Code, definition, service
from app.grpc.proxy_convert import (
    ack_status,
    problem_status,
    queues_json,
    receive_json,
    received_of,
    send_entries,
    send_json,
)
from app.proxy.context import Proxy
from app.proxy.forward import BrokerAnswer, ProxyError, broker_path
from services.cluster import NoMasterError, groups_with_master, master_of

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]


# ================================================================ the proxy's app, in process


@dataclass(frozen=True, slots=True)
class AppAnswer:
    """What the proxy's app answered a request: its status, headers and body."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def json(self) -> Any:
        return orjson.loads(self.body)


class AppCaller:
    """Requests to the proxy's app over ASGI, in the process (httpx's ASGI transport): what a
    client of the HTTP API would be answered, without a socket or the HTTP wire."""

    def __init__(self, app: FastAPI) -> None:
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://proxy", timeout=None
        )

    async def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> AppAnswer:
        content = None if json is None else orjson.dumps(json)
        sent = list(headers)
        if content is not None:
            sent.append((b"content-type", b"application/json"))
        response = await self.http.request(method, path, content=content, headers=sent)
        return AppAnswer(response.status_code, list(response.headers.raw), response.content)


def checked(answer: AppAnswer) -> Any:
    """A successful answer's JSON; a problem answer raised as the status it maps to."""
    if answer.ok:
        return answer.json()
    try:
        problem = answer.json()
    except orjson.JSONDecodeError:
        problem = {}
    answered = problem_status(answer.status, problem if isinstance(problem, dict) else {})
    raise ProtocolError(answered.code, answered.message)


# ================================================================ the calls


class ProxyMessagingFace:
    """The calls of MessagingService over the proxy's app; ``endpoints`` is what QueryRoute
    answers (known once the server is bound)."""

    def __init__(self, app: FastAPI, *, max_body_bytes: int) -> None:
        self.app = app
        self.caller = AppCaller(app)
        self.max_body_bytes = max_body_bytes
        self.clients = ClientTable()
        self.endpoints = endpoints_of("127.0.0.1", 0)

    def serve_at(self, host: str, port: int) -> None:
        self.endpoints = endpoints_of(host, port)

    def calls(self) -> Mapping[str, Callable[..., Any]]:
        """The calls this face serves, by the service's method names (the others answer
        ``UNIMPLEMENTED``: ask a broker's gRPC face)."""
        return {
            "QueryRoute": self.query_route,
            "QueryAssignment": self.query_assignment,
            "Heartbeat": self.heartbeat,
            "NotifyClientTermination": self.notify_client_termination,
            "Telemetry": self.telemetry,
            "SendMessage": self.send_message,
            "ReceiveMessage": self.receive_message,
            "AckMessage": self.ack_message,
            "ChangeInvisibleDuration": self.change_invisible_duration,
        }

    # ------------------------------------------------------------------ route and clients

    async def _route(self, topic: str) -> Any:
        """The topic's route as the proxy's ``getTopicRoute`` answers it."""
        return checked(await self.caller.call("GET", broker_path("v1", "topics", topic, "route")))

    async def query_route(self, request: Any, context: Context) -> Any:
        route = await self._route(request.topic.name)
        return service.QueryRouteResponse(
            status=status(), message_queues=queues_json(route, self.endpoints)
        )

    async def query_assignment(self, request: Any, context: Context) -> Any:
        """One queue: a receive there takes from every group hosting the topic."""
        route = await self._route(request.topic.name)
        first = queues_json(route, self.endpoints)[:1]
        assignments = [definition.Assignment(message_queue=queue) for queue in first]
        return service.QueryAssignmentResponse(status=status(), assignments=assignments)

    async def heartbeat(self, request: Any, context: Context) -> Any:
        group = request.group.name if request.HasField("group") else ""
        self.clients.heard(context, definition.ClientType.Name(request.client_type), group)
        return service.HeartbeatResponse(status=status())

    async def notify_client_termination(self, request: Any, context: Context) -> Any:
        self.clients.terminated(metadata(context, CLIENT_ID))
        return service.NotifyClientTerminationResponse(status=status())

    async def telemetry(self, requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        """Each settings command is answered with the settings the client is to use."""
        async for command in requests:
            if command.HasField("settings"):
                settings = await self._settings_for(command.settings, context)
                yield service.TelemetryCommand(status=status(), settings=settings)

    async def _settings_for(self, settings: Any, context: Context) -> Any:
        group = self.clients.heard_settings(context, settings)
        fifo, retry_max_times = await self._group_config(group)
        return settings_answer(
            settings, max_body_bytes=self.max_body_bytes, fifo=fifo, retry_max_times=retry_max_times
        )

    async def _group_config(self, group: str) -> tuple[bool, int | None]:
        """A consumer group's FIFO flag and retries, as the first group with a master keeps
        them (every broker group gets the same config); none when it cannot be read."""
        if not group:
            return False, None
        proxy: Proxy = self.app.state.proxy
        view = proxy.registry.view
        for name in groups_with_master(view):
            try:
                answer: BrokerAnswer = await proxy.forwarder.call(
                    master_of(view, name), "GET", broker_path("v1", "groups", group)
                )
            except (ProxyError, NoMasterError):
                continue  # its master went away meanwhile: the next group's will do
            if answer.ok:
                config = answer.json()
                return bool(config.get("fifo")), int(config["retry_max_times"])
            return False, None
        return False, None

    # ------------------------------------------------------------------ send

    async def send_message(self, request: Any, context: Context) -> Any:
        messages = list(request.messages)
        if not messages:
            raise ProtocolError(Code.BAD_REQUEST, "a send needs at least one message")
        topics = {message.topic.name for message in messages}
        if len(topics) != 1:
            raise ProtocolError(Code.BAD_REQUEST, "the messages of one send share one topic")
        sent = checked(
            await self.caller.call(
                "POST",
                broker_path("v1", "topics", topics.pop(), "messages"),
                json=send_json(messages),
            )
        )
        return service.SendMessageResponse(status=status(), entries=send_entries(sent))

    # ------------------------------------------------------------------ POP

    async def receive_message(self, request: Any, context: Context) -> AsyncIterator[Any]:
        try:
            body = receive_json(request)
            received = checked(
                await self.caller.call(
                    "POST",
                    broker_path(
                        "v1",
                        "groups",
                        request.group.name,
                        "topics",
                        request.message_queue.topic.name,
                        "receive",
                    ),
                    json=body,
                )
            )
        except ProtocolError as exc:
            yield service.ReceiveMessageResponse(status=status(exc.code, str(exc)))
            return
        messages = received.get("messages") or []
        if not messages:
            yield service.ReceiveMessageResponse(
                status=status(Code.MESSAGE_NOT_FOUND, "no new message")
            )
            return
        yield service.ReceiveMessageResponse(status=status())
        for item in messages:
            yield service.ReceiveMessageResponse(message=received_of(item, body["invisible_ms"]))
        now = time.time_ns()
        yield service.ReceiveMessageResponse(
            delivery_timestamp={"seconds": now // 10**9, "nanos": now % 10**9}
        )

    async def ack_message(self, request: Any, context: Context) -> Any:
        handles = [entry.receipt_handle for entry in request.entries]
        acked = checked(
            await self.caller.call(
                "POST",
                broker_path("v1", "groups", request.group.name, "acks"),
                json={"receipt_handles": handles},
            )
        )
        entries = [
            service.AckMessageResultEntry(
                message_id=entry.message_id,
                receipt_handle=entry.receipt_handle,
                status=ack_status(outcome),
            )
            for entry, outcome in zip(request.entries, acked["results"], strict=True)
        ]
        codes = {entry.status.code for entry in entries}
        if len(codes) > 1:
            batch = status(Code.MULTIPLE_RESULTS, "the entries' outcomes differ")
        else:
            batch = entries[0].status if entries else status()
        return service.AckMessageResponse(status=batch, entries=entries)

    async def change_invisible_duration(self, request: Any, context: Context) -> Any:
        duration = request.invisible_duration
        ms = millis(duration) and invisible_ms_of(duration)
        changed = checked(
            await self.caller.call(
                "POST",
                broker_path("v1", "groups", request.group.name, "invisibility"),
                json={"receipt_handle": request.receipt_handle, "invisible_ms": ms},
            )
        )
        return service.ChangeInvisibleDurationResponse(
            status=status(), receipt_handle=changed.get("receipt_handle") or ""
        )

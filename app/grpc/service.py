"""``apache.rocketmq.v2.MessagingService``: each call a thin face over the service of its operation.

QueryRoute answers this broker's queues at this face's address; Heartbeat, Telemetry and
NotifyClientTermination keep the client table (:mod:`app.grpc.clients`); SendMessage is the
send service's send; ReceiveMessage, AckMessage and ChangeInvisibleDuration are the POP
service's receive, ack and change of invisibility; ForwardMessageToDeadLetterQueue is the
send-back service's send to ``%DLQ%<group>`` and then the POP ack. Errors answer the ``Code``
of their domain code (:mod:`app.grpc.codes`) in the response's status, as RocketMQ's proxy does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import grpc

from app.grpc.clients import ClientTable
from app.grpc.codes import code_of
from app.grpc.convert import (
    ProtocolError,
    endpoints_of,
    invisible_ms_of,
    message_of,
    millis,
    outgoing_of,
    queues_of,
    receive_options_of,
    send_entry_of,
    status,
)
from app.grpc.protocol import Code, definition, service
from services import AckResult, Broker, SendBackRequest
from services.errors import ServiceError, StorageError, TopicNotFoundError

log = logging.getLogger(__name__)

Context = grpc.aio.ServicerContext[Any, Any]

CLIENT_ID: Final = "x-mq-client-id"
LANGUAGE: Final = "x-mq-language"
CLIENT_VERSION: Final = "x-mq-client-version"
PRODUCER_MAX_ATTEMPTS: Final = 3


class MessagingFace:
    """The calls of MessagingService over one broker; ``address`` is what QueryRoute answers."""

    def __init__(self, broker: Broker, *, broker_name: str, max_body_bytes: int) -> None:
        self.broker = broker
        self.broker_name = broker_name
        self.max_body_bytes = max_body_bytes
        self.clients = ClientTable()
        self.endpoints = endpoints_of("127.0.0.1", 0)

    def serve_at(self, host: str, port: int) -> None:
        """The address clients reach this face at (known once the server is bound)."""
        self.endpoints = endpoints_of(host, port)

    # ------------------------------------------------------------------ route and clients

    async def query_route(self, request: Any, context: Context) -> Any:
        topic = request.topic.name
        try:
            config = self.broker.topics.get(topic)
        except TopicNotFoundError:
            config = await self.broker.topics.for_produce(topic)  # auto-created where allowed
        queues = queues_of(config, self.broker_name, self.endpoints)
        return service.QueryRouteResponse(status=status(), message_queues=queues)

    async def query_assignment(self, request: Any, context: Context) -> Any:
        """One queue of this broker: a receive there takes from every queue of the topic."""
        config = self.broker.topics.for_read(request.topic.name)
        first = queues_of(config, self.broker_name, self.endpoints)[:1]
        assignments = [definition.Assignment(message_queue=queue) for queue in first]
        return service.QueryAssignmentResponse(status=status(), assignments=assignments)

    async def heartbeat(self, request: Any, context: Context) -> Any:
        group = request.group.name if request.HasField("group") else ""
        self._seen(context, definition.ClientType.Name(request.client_type), group)
        return service.HeartbeatResponse(status=status())

    async def notify_client_termination(self, request: Any, context: Context) -> Any:
        self.clients.terminated(_metadata(context, CLIENT_ID))
        return service.NotifyClientTerminationResponse(status=status())

    async def telemetry(self, requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        """Each settings command the client sends is answered with the settings it is to
        use; the other commands (answers to the server's own) need no reply."""
        async for command in requests:
            if command.HasField("settings"):
                yield service.TelemetryCommand(
                    status=status(), settings=await self._settings_for(command.settings, context)
                )

    async def _settings_for(self, settings: Any, context: Context) -> Any:
        group = settings.subscription.group.name if settings.HasField("subscription") else ""
        self._seen(
            context,
            definition.ClientType.Name(settings.client_type),
            group,
            language=definition.Language.Name(settings.user_agent.language),
            version=settings.user_agent.version,
        )
        answer = definition.Settings()
        answer.CopyFrom(settings)
        if settings.HasField("publishing"):
            answer.publishing.MergeFrom(definition.Publishing(max_body_size=self.max_body_bytes))
            answer.backoff_policy.CopyFrom(
                definition.RetryPolicy(
                    max_attempts=PRODUCER_MAX_ATTEMPTS,
                    exponential_backoff=definition.ExponentialBackoff(
                        initial={"nanos": 10_000_000}, max={"seconds": 1}, multiplier=2.0
                    ),
                )
            )
        if group:
            config = self.broker.groups.get(group) if self.broker.groups.exists(group) else None
            answer.subscription.fifo = config is not None and config.fifo
            answer.subscription.MergeFrom(definition.Subscription(receive_batch_size=32))
            if not settings.subscription.HasField("long_polling_timeout"):
                answer.subscription.long_polling_timeout.seconds = 20
            # the client's own retries: one delivery more than the group's retries, a second apart
            answer.backoff_policy.CopyFrom(
                definition.RetryPolicy(
                    max_attempts=(config.retry_max_times if config else 16) + 1,
                    customized_backoff=definition.CustomizedBackoff(next=[{"seconds": 1}]),
                )
            )
        return answer

    def _seen(self, context: Context, client_type: str, group: str, **said: str) -> None:
        client_id = _metadata(context, CLIENT_ID)
        if client_id:
            self.clients.seen(
                client_id,
                client_type=client_type,
                group=group,
                language=said.get("language") or _metadata(context, LANGUAGE),
                version=said.get("version") or _metadata(context, CLIENT_VERSION),
            )

    # ------------------------------------------------------------------ send

    async def send_message(self, request: Any, context: Context) -> Any:
        if not request.messages:
            raise ProtocolError(Code.BAD_REQUEST, "a send needs at least one message")
        topics = {message.topic.name for message in request.messages}
        if len(topics) != 1:
            raise ProtocolError(Code.BAD_REQUEST, "the messages of one send share one topic")
        sent = await self.broker.send.send(
            topics.pop(),
            [outgoing_of(message) for message in request.messages],
            born_host=_peer(context),
        )
        return service.SendMessageResponse(
            status=status(), entries=[send_entry_of(receipt) for receipt in sent]
        )

    # ------------------------------------------------------------------ POP

    async def receive_message(self, request: Any, context: Context) -> AsyncIterator[Any]:
        try:
            options = receive_options_of(request, None)
            received = await self.broker.pop.receive(
                request.group.name,
                request.message_queue.topic.name,
                options,
                holder=_metadata(context, CLIENT_ID),
            )
        except Exception as exc:
            yield service.ReceiveMessageResponse(status=failure_status(exc))
            return
        if not received.messages:
            yield service.ReceiveMessageResponse(
                status=status(Code.MESSAGE_NOT_FOUND, "no new message")
            )
            return
        yield service.ReceiveMessageResponse(status=status())
        for one in received.messages:
            message = message_of(one)
            message.system_properties.invisible_duration.seconds = options.invisible_ms // 1000
            yield service.ReceiveMessageResponse(message=message)
        now = time.time_ns()
        yield service.ReceiveMessageResponse(
            delivery_timestamp={"seconds": now // 10**9, "nanos": now % 10**9}
        )

    async def ack_message(self, request: Any, context: Context) -> Any:
        handles = [entry.receipt_handle for entry in request.entries]
        results = await self.broker.pop.ack(request.group.name, handles)
        entries = [
            service.AckMessageResultEntry(
                message_id=entry.message_id,
                receipt_handle=entry.receipt_handle,
                status=_ack_status(result),
            )
            for entry, result in zip(request.entries, results, strict=True)
        ]
        return service.AckMessageResponse(status=_batch_status(entries), entries=entries)

    async def change_invisible_duration(self, request: Any, context: Context) -> Any:
        ms = millis(request.invisible_duration)
        change = await self.broker.pop.change_invisibility(
            request.group.name,
            request.receipt_handle,
            ms and invisible_ms_of(request.invisible_duration),
        )
        return service.ChangeInvisibleDurationResponse(
            status=status(), receipt_handle=change.receipt_handle or ""
        )

    async def forward_message_to_dead_letter_queue(self, request: Any, context: Context) -> Any:
        """RocketMQ's forwardMessageToDeadLetterQueue: the message goes to ``%DLQ%<group>``
        (send-back, straight to the DLQ), then the delivery is acked."""
        group, text = request.group.name, request.receipt_handle
        pop = self.broker.pop
        handle = pop.codec.decode(text)
        message = pop.message_at((handle.group, handle.topic, handle.queue_id), handle.offset)
        if message is None or handle.group != group:
            raise ProtocolError(Code.INVALID_RECEIPT_HANDLE, "no message in flight for this handle")
        await self.broker.send_back.send_back(
            SendBackRequest(group, commit_log_offset=message.physical_offset, delay_level=-1)
        )
        [result] = await pop.ack(group, [text])
        return service.ForwardMessageToDeadLetterQueueResponse(status=_ack_status(result))


def failure_status(exc: BaseException) -> Any:
    """The status an error answers: its ``Code`` and its message."""
    if isinstance(exc, ProtocolError):
        return status(exc.code, str(exc))
    if isinstance(exc, ServiceError | StorageError):
        return status(code_of(exc.code), str(exc))
    log.exception("unexpected error in a gRPC call", exc_info=exc)
    return status(Code.INTERNAL_SERVER_ERROR, "internal error")


def answering_failures(
    call: Callable[[Any, Context], Awaitable[Any]], response: Any
) -> Callable[[Any, Context], Awaitable[Any]]:
    """``call``, with an error answered as a ``response`` carrying its status."""

    async def answer(request: Any, context: Context) -> Any:
        try:
            return await call(request, context)
        except Exception as exc:
            return response(status=failure_status(exc))

    return answer


def _ack_status(result: AckResult) -> Any:
    if result.outcome.value == "acked":
        return status()
    return status(Code.INVALID_RECEIPT_HANDLE, result.detail or result.outcome.value)


def _batch_status(entries: list[Any]) -> Any:
    codes = {entry.status.code for entry in entries}
    if len(codes) <= 1:
        return entries[0].status if entries else status()
    return status(Code.MULTIPLE_RESULTS, "the entries' outcomes differ")


def _metadata(context: Context, name: str) -> str:
    for key, value in context.invocation_metadata() or ():
        if key == name:
            return value if isinstance(value, str) else value.decode()
    return ""


def _peer(context: Context) -> tuple[str, int]:
    """The client's address (``ipv4:127.0.0.1:5000``) as a born host."""
    kind, _, address = context.peer().partition(":")
    host, _, port = address.rpartition(":")
    if kind not in ("ipv4", "ipv6") or not port.isdigit():
        return ("127.0.0.1", 0)
    return (host.strip("[]"), int(port))

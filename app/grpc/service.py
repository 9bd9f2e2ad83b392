"""``apache.rocketmq.v2.MessagingService``: each call a thin face over the service of its operation.

QueryRoute answers this broker's queues at this face's address; Heartbeat, Telemetry and
NotifyClientTermination keep the client table (:mod:`app.grpc.clients`); SendMessage is the
send service's send; ReceiveMessage, AckMessage and ChangeInvisibleDuration are the POP
service's receive, ack and change of invisibility; ForwardMessageToDeadLetterQueue is the
send-back service's send to ``%DLQ%<group>`` and then the POP ack. A TRANSACTION message,
EndTransaction and the check-backs down the Telemetry stream are the transaction service's
(:mod:`app.grpc.transactions`); RecallMessage is the timer service's cancel; the offset calls
are in :mod:`app.grpc.offsets`. Every call is signed when the broker has an auth file
(:mod:`app.grpc.auth`). Errors answer the ``Code`` of their domain code (:mod:`app.grpc.codes`)
in the response's status, as RocketMQ's proxy does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from app.grpc.auth import Context, Guard
from app.grpc.clients import CLIENT_ID, ClientTable, metadata, peer
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
    settings_answer,
    status,
)
from app.grpc.offsets import OffsetCalls
from app.grpc.protocol import Code, MessageType, definition, service
from app.grpc.transactions import TransactionChecks, close_checks, end_transaction, send_half
from app.security.principals import Principal
from app.security.tokens import TokenRegistry
from services import AckResult, Broker, SendBackRequest
from services.errors import ServiceError, StorageError, TopicNotFoundError

log = logging.getLogger(__name__)


class MessagingFace:
    """The calls of MessagingService over one broker; ``address`` is what QueryRoute answers."""

    def __init__(
        self,
        broker: Broker,
        *,
        broker_name: str,
        max_body_bytes: int,
        tokens: TokenRegistry | None = None,
    ) -> None:
        self.broker = broker
        self.broker_name = broker_name
        self.max_body_bytes = max_body_bytes
        self.clients = ClientTable()
        self.guard = Guard(tokens)
        self.offsets = OffsetCalls(broker, self.guard)
        self.endpoints = endpoints_of("127.0.0.1", 0)

    def serve_at(self, host: str, port: int) -> None:
        """The address clients reach this face at (known once the server is bound)."""
        self.endpoints = endpoints_of(host, port)

    def calls(self) -> Mapping[str, Callable[..., Any]]:
        """The calls this face serves, by the service's method names."""
        return {
            "QueryRoute": self.query_route,
            "QueryAssignment": self.query_assignment,
            "Heartbeat": self.heartbeat,
            "NotifyClientTermination": self.notify_client_termination,
            "Telemetry": self.telemetry,
            "SendMessage": self.send_message,
            "EndTransaction": self.end_transaction,
            "RecallMessage": self.recall_message,
            "ReceiveMessage": self.receive_message,
            "AckMessage": self.ack_message,
            "ChangeInvisibleDuration": self.change_invisible_duration,
            "ForwardMessageToDeadLetterQueue": self.forward_message_to_dead_letter_queue,
            "UpdateOffset": self.offsets.update_offset,
            "GetOffset": self.offsets.get_offset,
            "QueryOffset": self.offsets.query_offset,
            "PullMessage": self.offsets.pull_message,
        }

    # ------------------------------------------------------------------ route and clients

    async def query_route(self, request: Any, context: Context) -> Any:
        topic = request.topic.name
        self.guard.require_see(self.guard.caller_of(context), topic)
        try:
            config = self.broker.topics.get(topic)
        except TopicNotFoundError:
            config = await self.broker.topics.for_produce(topic)  # auto-created where allowed
        queues = queues_of(config, self.broker_name, self.endpoints)
        return service.QueryRouteResponse(status=status(), message_queues=queues)

    async def query_assignment(self, request: Any, context: Context) -> Any:
        """One queue of this broker: a receive there takes from every queue of the topic."""
        self.guard.require_consume(
            self.guard.caller_of(context), request.group.name, request.topic.name
        )
        config = self.broker.topics.for_read(request.topic.name)
        first = queues_of(config, self.broker_name, self.endpoints)[:1]
        assignments = [definition.Assignment(message_queue=queue) for queue in first]
        return service.QueryAssignmentResponse(status=status(), assignments=assignments)

    async def heartbeat(self, request: Any, context: Context) -> Any:
        self.guard.caller_of(context)
        group = request.group.name if request.HasField("group") else ""
        self.clients.heard(context, definition.ClientType.Name(request.client_type), group)
        return service.HeartbeatResponse(status=status())

    async def notify_client_termination(self, request: Any, context: Context) -> Any:
        self.guard.caller_of(context)
        self.clients.terminated(metadata(context, CLIENT_ID))
        return service.NotifyClientTerminationResponse(status=status())

    async def telemetry(self, requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
        """Each settings command the client sends is answered with the settings it is to
        use; the other commands (answers to the server's own) need no reply. A producer's
        stream also carries the check-backs of its topics' transactions."""
        try:
            principal = self.guard.caller_of(context)
        except ProtocolError as exc:
            yield service.TelemetryCommand(status=failure_status(exc))
            return
        outbox: asyncio.Queue[Any] = asyncio.Queue()
        checks = TransactionChecks(self.broker.transactions, principal, outbox.put_nowait)
        reader = asyncio.create_task(self._read_commands(requests, context, outbox, checks))
        try:
            while (command := await outbox.get()) is not None:
                yield command
        finally:
            await close_checks(checks, reader)

    async def _read_commands(
        self,
        requests: AsyncIterator[Any],
        context: Context,
        outbox: asyncio.Queue[Any],
        checks: TransactionChecks,
    ) -> None:
        """The client's side of a Telemetry stream; ``None`` in ``outbox`` once it ends."""
        try:
            async for command in requests:
                if command.HasField("settings"):
                    settings = command.settings
                    outbox.put_nowait(
                        service.TelemetryCommand(
                            status=status(), settings=await self._settings_for(settings, context)
                        )
                    )
                    if settings.client_type == definition.ClientType.PRODUCER:
                        checks.watch(topic.name for topic in settings.publishing.topics)
        except Exception as exc:  # the stream broke: the client is gone
            log.debug("a Telemetry stream ended: %s", exc)
        finally:
            outbox.put_nowait(None)

    async def _settings_for(self, settings: Any, context: Context) -> Any:
        group = self.clients.heard_settings(context, settings)
        config = (
            self.broker.groups.get(group) if group and self.broker.groups.exists(group) else None
        )
        return settings_answer(
            settings,
            max_body_bytes=self.max_body_bytes,
            fifo=config is not None and config.fifo,
            retry_max_times=config.retry_max_times if config is not None else None,
        )

    # ------------------------------------------------------------------ send

    async def send_message(self, request: Any, context: Context) -> Any:
        if not request.messages:
            raise ProtocolError(Code.BAD_REQUEST, "a send needs at least one message")
        topics = {message.topic.name for message in request.messages}
        if len(topics) != 1:
            raise ProtocolError(Code.BAD_REQUEST, "the messages of one send share one topic")
        topic = topics.pop()
        caller = self.guard.caller_of(context)
        self.guard.require_produce(caller, topic)
        if any(
            m.system_properties.message_type == MessageType.TRANSACTION for m in request.messages
        ):
            return await self._send_half(request, caller, context)
        sent = await self.broker.send.send(
            topic,
            [outgoing_of(message) for message in request.messages],
            born_host=peer(context),
        )
        return service.SendMessageResponse(
            status=status(), entries=[send_entry_of(receipt) for receipt in sent]
        )

    async def _send_half(self, request: Any, caller: Principal, context: Context) -> Any:
        """A TRANSACTION message: a half message of its topic's producer group."""
        if len(request.messages) != 1:
            raise ProtocolError(Code.BAD_REQUEST, "a transactional send has one message")
        [message] = request.messages
        self.guard.require_producer_group(caller, message.topic.name)
        entry = await send_half(self.broker, message, peer(context))
        return service.SendMessageResponse(status=status(), entries=[entry])

    async def end_transaction(self, request: Any, context: Context) -> Any:
        caller = self.guard.caller_of(context)
        self.guard.require_produce(caller, request.topic.name)
        self.guard.require_producer_group(caller, request.topic.name)
        return await end_transaction(self.broker, request)

    async def recall_message(self, request: Any, context: Context) -> Any:
        """The timer service's cancel of the message the recall handle names."""
        topic = request.topic.name
        self.guard.require_produce(self.guard.caller_of(context), topic)
        cancelled = await self.broker.timers.cancel(topic, request.recall_handle)
        return service.RecallMessageResponse(status=status(), message_id=cancelled.uniq_key)

    # ------------------------------------------------------------------ POP

    async def receive_message(self, request: Any, context: Context) -> AsyncIterator[Any]:
        try:
            self.guard.require_consume(
                self.guard.caller_of(context),
                request.group.name,
                request.message_queue.topic.name,
            )
            options = receive_options_of(request, None)
            received = await self.broker.pop.receive(
                request.group.name,
                request.message_queue.topic.name,
                options,
                holder=metadata(context, CLIENT_ID),
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
        self.guard.require_consume(
            self.guard.caller_of(context), request.group.name, request.topic.name
        )
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
        self.guard.require_consume(
            self.guard.caller_of(context), request.group.name, request.topic.name
        )
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
        self.guard.require_consume(self.guard.caller_of(context), group, request.topic.name)
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


def streaming_failures(
    call: Callable[[Any, Context], AsyncIterator[Any]], response: Any
) -> Callable[[Any, Context], AsyncIterator[Any]]:
    """A server-streaming ``call``, with an error before its first answer answered as one
    ``response`` carrying its status."""

    async def answer(request: Any, context: Context) -> AsyncIterator[Any]:
        answered = False
        try:
            async for one in call(request, context):
                answered = True
                yield one
        except Exception as exc:
            if answered:
                raise
            yield response(status=failure_status(exc))

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

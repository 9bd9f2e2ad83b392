"""Between the protocol's messages and the services' values: the gRPC face's one converter.

A producer's ``apache.rocketmq.v2.Message`` becomes an :class:`~services.OutgoingMessage` (tag,
keys, user properties; the message group is its sharding key and is kept as RocketMQ's
``__SHARDINGKEY`` property; a ``delivery_timestamp`` makes a timer message; the client's message
id is kept as the record's ``UNIQ_KEY``, so the id a producer is answered is the id its
consumers see). A received :class:`~services.pop.service.ReceivedMessage` becomes the
protocol's message with its system properties (receipt handle, delivery attempt, CRC32 body
digest, ...), and a send receipt a ``SendResultEntry``.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Final

from app.grpc.protocol import Code, MessageType, definition, service
from services import (
    DEFAULT_INVISIBLE_MS,
    MAX_INVISIBLE_MS,
    MAX_RECEIVE_MESSAGES,
    MIN_INVISIBLE_MS,
    RESERVED_PROPERTIES,
    CheckOffer,
    OutgoingMessage,
    ReceiveOptions,
    SendReceipt,
    TopicConfig,
)
from storage.record.message import StoredMessage

PROPERTY_MESSAGE_GROUP: Final = "__SHARDINGKEY"
"""RocketMQ's property of a FIFO message's group (``MessageConst.PROPERTY_SHARDING_KEY``)."""
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
"""The record property that holds the client's message id."""
_TIMER_PROPERTIES: Final = ("TIMER_DELIVER_MS", "DELAY")
"""A received message that carries one of these was delayed or timed."""
_HIDDEN: Final = RESERVED_PROPERTIES | {PROPERTY_MESSAGE_GROUP, PROPERTY_UNIQ_KEY}
"""Properties that travel as system properties (or not at all), never as user properties."""
ACCEPTED_MESSAGE_TYPES: Final = (
    MessageType.NORMAL,
    MessageType.FIFO,
    MessageType.DELAY,
    MessageType.TRANSACTION,
)
"""Every queue takes every kind of message: a spoolmq topic has no message type."""
DEFAULT_WAIT_MS: Final = 20_000
"""A receive's long poll when the request names none (the clients' default)."""


class ProtocolError(Exception):
    """A request the protocol's own rules refuse, with the ``Code`` it answers."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def status(code: int = Code.OK, message: str = "OK") -> Any:
    return definition.Status(code=code, message=message)


def millis(timestamp: Any) -> int:
    """A ``Timestamp`` or ``Duration`` in milliseconds."""
    return int(timestamp.seconds) * 1000 + int(timestamp.nanos) // 1_000_000


def set_millis(target: Any, ms: int) -> None:
    target.seconds, target.nanos = divmod(ms, 1000)[0], (ms % 1000) * 1_000_000


# ---------------------------------------------------------------------- send


def outgoing_of(message: Any) -> OutgoingMessage:
    """A producer's message as the send service takes it."""
    system = message.system_properties
    if system.body_encoding == definition.Encoding.GZIP:
        body = zlib.decompress(message.body, wbits=31)
    else:
        body = bytes(message.body)
    properties = dict(message.user_properties)
    if system.message_id:
        properties[PROPERTY_UNIQ_KEY] = system.message_id
    group = system.message_group if system.HasField("message_group") else ""
    if group:
        properties[PROPERTY_MESSAGE_GROUP] = group
    deliver_at = (
        millis(system.delivery_timestamp) if system.HasField("delivery_timestamp") else None
    )
    return OutgoingMessage(
        body,
        tags=system.tag if system.HasField("tag") and system.tag else None,
        keys=tuple(system.keys),
        properties=properties,
        sharding_key=group or None,
        deliver_at=deliver_at or None,
    )


def send_entry_of(receipt: SendReceipt) -> Any:
    """One stored message as the producer is answered."""
    return service.SendResultEntry(
        status=status(),
        message_id=receipt.uniq_key,
        offset=receipt.queue_offset,
        recall_handle=receipt.timer_handle or "",
    )


# ---------------------------------------------------------------------- route


def queues_of(config: TopicConfig, broker_name: str, endpoints: Any) -> list[Any]:
    """The topic's queues as a route lists them, all on this broker (``endpoints``)."""
    broker = definition.Broker(name=broker_name, id=0, endpoints=endpoints)
    count = max(config.read_queue_nums, config.write_queue_nums)
    return [
        definition.MessageQueue(
            topic=definition.Resource(name=config.topic_name),
            id=queue_id,
            permission=_permission(config, queue_id),
            broker=broker,
            accept_message_types=ACCEPTED_MESSAGE_TYPES,
        )
        for queue_id in range(count)
    ]


def _permission(config: TopicConfig, queue_id: int) -> int:
    readable = config.is_readable and queue_id < config.read_queue_nums
    writeable = config.is_writeable and queue_id < config.write_queue_nums
    permission = definition.Permission
    if readable and writeable:
        return int(permission.READ_WRITE)
    if readable:
        return int(permission.READ)
    return int(permission.WRITE if writeable else permission.NONE)


def endpoints_of(host: str, port: int) -> Any:
    """This face's address as the protocol gives endpoints."""
    scheme = definition.AddressScheme.IPv4
    if ":" in host:
        scheme = definition.AddressScheme.IPv6
    elif not host.replace(".", "").isdigit():
        scheme = definition.AddressScheme.DOMAIN_NAME
    return definition.Endpoints(scheme=scheme, addresses=[definition.Address(host=host, port=port)])


# ---------------------------------------------------------------------- receive


def receive_options_of(request: Any, max_bytes: int | None) -> ReceiveOptions:
    """What a ReceiveMessageRequest asks the POP service for."""
    batch = request.batch_size or 1
    if not 0 < batch <= MAX_RECEIVE_MESSAGES:
        raise ProtocolError(
            Code.BAD_REQUEST, f"batch_size must be 1 to {MAX_RECEIVE_MESSAGES}, not {batch}"
        )
    invisible_ms = DEFAULT_INVISIBLE_MS  # a push consumer names none
    if request.HasField("invisible_duration"):
        invisible_ms = invisible_ms_of(request.invisible_duration)
    wait_ms = DEFAULT_WAIT_MS
    if request.HasField("long_polling_timeout"):
        wait_ms = millis(request.long_polling_timeout)
    if wait_ms < 0:
        raise ProtocolError(Code.ILLEGAL_POLLING_TIME, "long_polling_timeout may not be negative")
    tags, sql = filter_of(request.filter_expression)
    return ReceiveOptions(batch, wait_ms, invisible_ms, tags, max_bytes, sql)


def invisible_ms_of(duration: Any) -> int:
    """A requested invisibility in ms, within the POP service's bounds."""
    ms = millis(duration)
    if not MIN_INVISIBLE_MS <= ms <= MAX_INVISIBLE_MS:
        raise ProtocolError(
            Code.ILLEGAL_INVISIBLE_TIME,
            f"invisible_duration must be {MIN_INVISIBLE_MS} to {MAX_INVISIBLE_MS} ms, not {ms}",
        )
    return ms


def filter_of(expression: Any) -> tuple[str | None, str | None]:
    """A FilterExpression as the receive's tags expression and SQL92 filter."""
    text = expression.expression.strip()
    if expression.type == definition.FilterType.SQL:
        return None, text or None
    return (None if text in ("", "*") else text), None


def message_of(received: Any) -> Any:
    """A received message (:class:`~services.pop.service.ReceivedMessage`) as the protocol's."""
    message = stored_message_of(received.message)
    system = message.system_properties
    system.receipt_handle = received.receipt_handle
    system.delivery_attempt = received.delivery_attempt
    return message


def stored_message_of(stored: StoredMessage, topic: str | None = None) -> Any:
    """A stored message as the protocol's, under ``topic`` (default: its own)."""
    properties: Mapping[str, str] = stored.properties
    message = protocol_message(
        topic or stored.topic,
        stored.body,
        {k: v for k, v in properties.items() if k not in _HIDDEN},
        properties.get("TAGS"),
        _keys(properties.get("KEYS", "")),
    )
    system = message.system_properties
    system.message_id = properties.get(PROPERTY_UNIQ_KEY) or stored.msg_id
    describe(system, properties)
    set_millis(system.born_timestamp, stored.born_timestamp)
    system.born_host = stored.born_host[0]
    set_millis(system.store_timestamp, stored.store_timestamp)
    system.store_host = "{}:{}".format(*stored.store_host)
    system.queue_id = stored.queue_id
    system.queue_offset = stored.queue_offset
    return message


def pulled_message_of(view: Any) -> Any:
    """A pulled message (:class:`~storage.record.fields.NamedView`) as the protocol's."""
    properties = view.properties
    message = protocol_message(
        view.topic,
        view.body,
        {k: v for k, v in properties.items() if k not in _HIDDEN},
        view.tags,
        view.keys,
    )
    system = message.system_properties
    system.message_id = properties.get(PROPERTY_UNIQ_KEY) or view.msg_id
    describe(system, properties)
    set_millis(system.born_timestamp, view.born_timestamp)
    set_millis(system.store_timestamp, view.store_timestamp)
    system.queue_id = view.queue_id
    system.queue_offset = view.queue_offset
    system.delivery_attempt = view.reconsume_times + 1
    return message


def protocol_message(
    topic: str, body: bytes, user_properties: Mapping[str, str], tags: str | None, keys: Any
) -> Any:
    message = definition.Message(
        topic=definition.Resource(name=topic), user_properties=user_properties, body=body
    )
    system = message.system_properties
    if tags:
        system.tag = tags
    system.keys.extend(keys)
    system.body_digest.type = definition.DigestType.CRC32
    system.body_digest.checksum = format(zlib.crc32(body), "08X")
    system.body_encoding = definition.Encoding.IDENTITY
    return message


def describe(system: Any, properties: Mapping[str, str]) -> None:
    """The system properties a message's own properties say: its type, group, due time."""
    group = properties.get(PROPERTY_MESSAGE_GROUP)
    system.message_type = _message_type(properties, group)
    if group:
        system.message_group = group
    deliver = properties.get("TIMER_DELIVER_MS")
    if deliver is not None and deliver.isdigit():
        set_millis(system.delivery_timestamp, int(deliver))


def _keys(text: str) -> Iterable[str]:
    return [key for key in text.split(" ") if key]


def _message_type(properties: Mapping[str, str], group: str | None) -> int:
    if group:
        return int(MessageType.FIFO)
    if any(name in properties for name in _TIMER_PROPERTIES):
        return int(MessageType.DELAY)
    return int(MessageType.NORMAL)


# ---------------------------------------------------------------------- settings

PRODUCER_MAX_ATTEMPTS: Final = 3
"""How often a producer tries a send (the first attempt included)."""


def settings_answer(
    settings: Any, *, max_body_bytes: int, fifo: bool, retry_max_times: int | None
) -> Any:
    """The settings a client is to use, answering the ones it sent over Telemetry: a producer
    its body cap and send retries, a consumer its group's FIFO flag, batch, long poll and one
    delivery more than the group's retries (``retry_max_times``; None: no such group), a
    second apart."""
    answer = definition.Settings()
    answer.CopyFrom(settings)
    if settings.HasField("publishing"):
        answer.publishing.MergeFrom(definition.Publishing(max_body_size=max_body_bytes))
        answer.backoff_policy.CopyFrom(
            definition.RetryPolicy(
                max_attempts=PRODUCER_MAX_ATTEMPTS,
                exponential_backoff=definition.ExponentialBackoff(
                    initial={"nanos": 10_000_000}, max={"seconds": 1}, multiplier=2.0
                ),
            )
        )
    if settings.HasField("subscription") and settings.subscription.group.name:
        answer.subscription.fifo = fifo
        answer.subscription.MergeFrom(definition.Subscription(receive_batch_size=32))
        if not settings.subscription.HasField("long_polling_timeout"):
            answer.subscription.long_polling_timeout.seconds = 20
        answer.backoff_policy.CopyFrom(
            definition.RetryPolicy(
                max_attempts=(16 if retry_max_times is None else retry_max_times) + 1,
                customized_backoff=definition.CustomizedBackoff(next=[{"seconds": 1}]),
            )
        )
    return answer


# ---------------------------------------------------------------------- transactions


def recover_command_of(offer: CheckOffer) -> Any:
    """A check-back offer as the Telemetry command that asks the producer's checker."""
    transaction = offer.transaction
    message = stored_message_of(offer.half, transaction.topic)
    message.system_properties.message_id = transaction.transaction_id
    message.system_properties.message_type = MessageType.TRANSACTION
    return service.TelemetryCommand(
        recover_orphaned_transaction_command=service.RecoverOrphanedTransactionCommand(
            message=message, transaction_id=transaction.transaction_id
        )
    )

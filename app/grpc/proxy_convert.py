"""Between RocketMQ 5's protocol and the proxy's HTTP API: the JSON its processors take and give.

The proxy's gRPC face (:mod:`app.grpc.proxy_face`) asks the proxy's own endpoints, so what a
gRPC call carries is written as the request body of the matching HTTP operation, and what that
operation answers is read back into the protocol's messages:

* a producer's ``Message`` becomes a JSON send: the body in base64, the tag, keys and user
  properties, the client's message id as the ``UNIQ_KEY`` property, the message group as the
  sharding key (and RocketMQ's ``__SHARDINGKEY`` property), a ``delivery_timestamp`` as
  ``deliver_at`` — what the broker's own face (:func:`app.grpc.convert.outgoing_of`) stores;
* a receive becomes a POP receive body, and each message of the proxy's answer (cluster-wide
  queue id, ``<group>~<handle>`` receipt handle) a protocol message;
* a topic's route (``getTopicRoute``) becomes its message queues, every one at the proxy's own
  address;
* a problem answer becomes a ``Status`` with the ``Code`` of its domain code.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any, Final

from app.grpc.codes import code_of
from app.grpc.convert import (
    ACCEPTED_MESSAGE_TYPES,
    PROPERTY_MESSAGE_GROUP,
    PROPERTY_UNIQ_KEY,
    ProtocolError,
    describe,
    outgoing_of,
    protocol_message,
    receive_options_of,
    set_millis,
    status,
)
from app.grpc.protocol import Code, MessageType, definition, service
from services import RESERVED_PROPERTIES

MAX_WAIT_MS: Final = 30_000
"""The longest long poll a POP receive takes (the proxy's ``ReceiveIn.wait_ms`` bound)."""
_HIDDEN: Final = RESERVED_PROPERTIES | {PROPERTY_MESSAGE_GROUP, PROPERTY_UNIQ_KEY}
"""Properties that travel as system properties (or not at all), never as user properties."""


# ---------------------------------------------------------------------- send


def send_json(messages: Sequence[Any]) -> dict[str, Any]:
    """A SendMessageRequest's messages as the body of ``sendMessages``: one message, or an
    atomic batch (one topic, checked by the caller)."""
    parts = [message_json(message) for message in messages]
    if len(parts) == 1:
        return parts[0]
    return {"messages": parts}


def message_json(message: Any) -> dict[str, Any]:
    """One producer message as a JSON send's message (read as the broker's face reads it)."""
    if message.system_properties.message_type == MessageType.TRANSACTION:
        raise ProtocolError(
            Code.NOT_IMPLEMENTED, "the proxy's gRPC face does not take transactional messages yet"
        )
    outgoing = outgoing_of(message)
    out: dict[str, Any] = {
        "body": base64.b64encode(outgoing.body).decode("ascii"),
        "body_encoding": "base64",
    }
    if outgoing.tags:
        out["tags"] = outgoing.tags
    if outgoing.keys:
        out["keys"] = list(outgoing.keys)
    if outgoing.sharding_key:
        out["sharding_key"] = outgoing.sharding_key
    if outgoing.deliver_at:
        out["deliver_at"] = outgoing.deliver_at
    if outgoing.properties:
        out["properties"] = dict(outgoing.properties)
    return out


def send_entries(answer: Mapping[str, Any]) -> list[Any]:
    """The receipts of ``sendMessages`` as the producer is answered."""
    return [
        service.SendResultEntry(
            status=status(),
            message_id=receipt["uniq_key"],
            offset=receipt["queue_offset"],
            recall_handle=receipt.get("timer_handle") or "",
        )
        for receipt in answer["messages"]
    ]


# ---------------------------------------------------------------------- route


def queues_json(route: Mapping[str, Any], endpoints: Any) -> list[Any]:
    """A topic's route (``getTopicRoute``) as message queues: the cluster-wide ids, each named
    by its broker group, all at the proxy's address (``endpoints``)."""
    topic = definition.Resource(name=route["topic"])
    return [
        definition.MessageQueue(
            topic=topic,
            id=queue["queue_id"],
            permission=definition.Permission.READ_WRITE,
            broker=definition.Broker(name=queue["group"], id=0, endpoints=endpoints),
            accept_message_types=ACCEPTED_MESSAGE_TYPES,
        )
        for queue in route["queues"]
    ]


# ---------------------------------------------------------------------- receive


def receive_json(request: Any) -> dict[str, Any]:
    """A ReceiveMessageRequest as the body of ``receiveMessages`` (the long poll within the
    proxy's bound; the bodies in base64, so every byte comes back as it was sent)."""
    options = receive_options_of(request, None)
    body: dict[str, Any] = {
        "max_messages": options.max_messages,
        "wait_ms": min(options.wait_ms, MAX_WAIT_MS),
        "invisible_ms": options.invisible_ms,
        "body_encoding": "base64",
    }
    if options.tags:
        body["tags"] = options.tags
    if options.sql:
        body["filter"] = options.sql
    return body


def received_of(item: Mapping[str, Any], invisible_ms: int) -> Any:
    """One message of the proxy's receive answer as the protocol's message."""
    properties: Mapping[str, str] = item.get("properties") or {}
    user_properties = {k: v for k, v in properties.items() if k not in _HIDDEN}
    message = protocol_message(
        item["topic"], _body(item), user_properties, item.get("tags"), item.get("keys") or ()
    )
    system = message.system_properties
    system.message_id = properties.get(PROPERTY_UNIQ_KEY) or item["msg_id"]
    describe(system, properties)
    set_millis(system.born_timestamp, item["born_timestamp"])
    set_millis(system.store_timestamp, item["store_timestamp"])
    system.store_host = item.get("broker_group", "")
    system.receipt_handle = item["receipt_handle"]
    system.queue_id = item["queue_id"]
    system.queue_offset = item["queue_offset"]
    system.delivery_attempt = item["delivery_attempt"]
    system.invisible_duration.seconds = invisible_ms // 1000
    return message


def _body(item: Mapping[str, Any]) -> bytes:
    text: str = item["body"]
    if item.get("body_encoding") == "base64":
        return base64.b64decode(text)
    return text.encode()


# ---------------------------------------------------------------------- acks and answers


def ack_status(outcome: Mapping[str, Any]) -> Any:
    """One handle's outcome of ``ackMessages`` as its entry's status."""
    if outcome["outcome"] == "acked":
        return status()
    code = outcome.get("code")
    detail = outcome.get("detail") or outcome["outcome"]
    if outcome["outcome"] == "failed" and code:
        return status(code_of(code), detail)
    return status(Code.INVALID_RECEIPT_HANDLE, detail)


def problem_status(http_status: int, problem: Mapping[str, Any]) -> Any:
    """A problem answer of the proxy as a status: the ``Code`` of its domain code."""
    code = problem.get("code")
    detail = str(problem.get("detail") or problem.get("title") or http_status)
    if not isinstance(code, str):
        return status(Code.INTERNAL_SERVER_ERROR, detail)
    return status(code_of(code), detail)

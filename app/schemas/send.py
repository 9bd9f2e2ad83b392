"""A send's body as the models read it, and its answer.

The models are the rules of a message wherever one enters: :class:`SendMessage` (one JSON
message; the half message of a transaction holds one too), :class:`SendBatch` (an atomic JSON
batch), :class:`RawSendQuery` (a raw body's description). :func:`json_send` and
:func:`raw_send` turn a request's body into what the send service takes
(:class:`SendRequest`), and :func:`outgoing` turns one validated message into an
:class:`~services.OutgoingMessage`. A JSON body is validated straight from its bytes by
TypedDicts made from the models (:func:`~app.schemas.common.validated_dicts`: the same rules,
plain dicts instead of a model per message).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import operator
from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, NamedTuple

import orjson
from fastapi.exceptions import RequestValidationError
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)

from app.errors import ApiError
from app.schemas.common import (
    INT64_MAX,
    KEY_RULES,
    MAX_BATCH_MESSAGES,
    MAX_DELAY_LEVEL,
    MAX_KEYS,
    MAX_PROPERTIES,
    MAX_QUEUES,
    SEPARATOR_FREE,
    TAG_RULES,
    JsonInt,
    MessageKey,
    ParamInt,
    PropertyValue,
    RequestBody,
    ResponseBody,
    ShortText,
    Tag,
    TimestampMs,
    text_schema,
    validated_dicts,
)
from app.settings import MAX_REQUEST_BYTES
from services import RESERVED_PROPERTIES, OutgoingMessage, Sent

TIMER_RULES: Final = (
    "Exact to the broker's timer precision (1 s by default; 100, 200 or 500 ms when "
    "configured): never delivered before the time, at most one precision after it on an idle "
    "broker. At most the broker's maximum timer delay ahead (3 days by default); a time that "
    "has passed is delivered at once. Give deliver_at or deliver_after_ms, not both, and not "
    "with delay_level. The receipt carries deliver_at and a timer_handle: DELETE "
    "/v1/topics/{topic}/timers/{timer_handle} cancels the message until it is delivered. In a "
    "batch every message is timed, or none is."
)


_HAS_DELIVER_AT: Final[dict[str, Any]] = {
    "required": ["deliver_at"],
    "properties": {"deliver_at": {"not": {"type": "null"}}},
}
_HAS_DELIVER_AFTER: Final[dict[str, Any]] = {
    "required": ["deliver_after_ms"],
    "properties": {"deliver_after_ms": {"not": {"type": "null"}}},
}
_DELAYED: Final[dict[str, Any]] = {
    "required": ["delay_level"],
    "properties": {"delay_level": {"type": "integer", "minimum": 1}},
}
_TIMED: Final[dict[str, Any]] = {
    "anyOf": [
        _HAS_DELIVER_AT,
        {
            "required": ["deliver_after_ms"],
            "properties": {"deliver_after_ms": {"type": "integer", "minimum": 1}},
        },
    ]
}
"""A message the timer wheel delivers (``deliver_after_ms: 0`` is no timer)."""
_BOTH_TIMES: Final[dict[str, Any]] = {"allOf": [_HAS_DELIVER_AT, _HAS_DELIVER_AFTER]}
_ONE_TIME_RULE: Final[dict[str, Any]] = {
    "not": {
        "anyOf": [
            _BOTH_TIMES,
            {"allOf": [_DELAYED, _HAS_DELIVER_AT]},
            {"allOf": [_DELAYED, _HAS_DELIVER_AFTER]},
        ]
    }
}
"""deliver_at or deliver_after_ms, not both, and neither with a delay level."""
_BATCH_TIME_RULE: Final[dict[str, Any]] = {
    "not": {
        "anyOf": [
            _BOTH_TIMES,
            # a batch is not delayed, and its time would meet a message's delay level
            {"properties": {"messages": {"minItems": 2, "contains": _DELAYED}}},
            {
                "allOf": [
                    {"anyOf": [_HAS_DELIVER_AT, _HAS_DELIVER_AFTER]},
                    {"properties": {"messages": {"contains": _DELAYED}}},
                ]
            },
            # without a time of its own, a batch is timed in every message or in none
            {
                "allOf": [
                    {"not": {"anyOf": [_HAS_DELIVER_AT, _HAS_DELIVER_AFTER]}},
                    {
                        "properties": {
                            "messages": {
                                "minItems": 2,
                                "allOf": [
                                    {"contains": _TIMED},
                                    {"contains": {"not": _TIMED}},
                                ],
                            }
                        }
                    },
                ]
            },
        ]
    }
}
"""A batch's timing rules (the service's, :meth:`services.SendService.send`)."""

BASE64_PATTERN: Final = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
"""Standard base64 with its padding, as the send decodes it."""
_BASE64_RULE: Final[dict[str, Any]] = {
    "if": {"properties": {"body_encoding": {"const": "base64"}}, "required": ["body_encoding"]},
    "then": {"properties": {"body": {"pattern": BASE64_PATTERN}}},
}
"""A base64 body is base64."""

PropertyName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=255),
    WithJsonSchema(
        text_schema(255, SEPARATOR_FREE, **{"not": {"enum": sorted(RESERVED_PROPERTIES)}})
    ),
]
"""A user property's name: not one the broker sets or reads (checked by the send service)."""


class SendMessage(RequestBody):
    """One message to send."""

    model_config = ConfigDict(json_schema_extra={**_ONE_TIME_RULE, **_BASE64_RULE})

    body: str = Field(
        min_length=1,
        max_length=MAX_REQUEST_BYTES,
        description="The message body: text, or base64 when body_encoding is base64; never empty.",
    )
    body_encoding: Literal["utf-8", "base64"] = Field(
        default="utf-8", description="How `body` is written: UTF-8 text, or base64 of binary data."
    )
    tags: Tag | None = Field(default=None, description=TAG_RULES)
    keys: list[MessageKey] = Field(
        default_factory=list,
        max_length=MAX_KEYS,
        description=f"Business keys, stored in the KEYS property. {KEY_RULES}",
    )
    properties: dict[PropertyName, PropertyValue] = Field(
        default_factory=dict,
        max_length=MAX_PROPERTIES,
        # the names' pattern makes the values' schema a patternProperties: a name outside
        # it is refused too, not left free
        json_schema_extra={"additionalProperties": False},
        description=(
            "User properties. Names the broker uses (TAGS, KEYS, DELAY, REAL_TOPIC, ...) are "
            "refused; UNIQ_KEY may be given, else the broker sets one."
        ),
    )
    queue_id: JsonInt | None = Field(
        default=None, ge=0, lt=MAX_QUEUES, description="Send to this queue (below writeQueueNums)."
    )
    sharding_key: ShortText | None = Field(
        default=None, description="Messages with the same key go to the same queue."
    )
    delay_level: JsonInt = Field(
        default=0,
        ge=0,
        le=MAX_DELAY_LEVEL,
        description=(
            "Deliver after this delay level: 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m "
            "30m 1h 2h by default (levels 1 to 18; the server's table may differ)."
        ),
    )
    deliver_after_ms: JsonInt | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description=f"A timer message: deliver this many ms after the send. {TIMER_RULES}",
    )
    deliver_at: TimestampMs | None = Field(
        default=None, description=f"A timer message: deliver at this time. {TIMER_RULES}"
    )


class SendBatch(RequestBody):
    """Several messages stored atomically in one queue with consecutive offsets."""

    model_config = ConfigDict(json_schema_extra=_BATCH_TIME_RULE)

    messages: list[SendMessage] = Field(min_length=1, max_length=MAX_BATCH_MESSAGES)
    queue_id: JsonInt | None = Field(
        default=None, ge=0, lt=MAX_QUEUES, description="Queue of the batch."
    )
    sharding_key: ShortText | None = Field(default=None, description="Sharding key of the batch.")
    deliver_after_ms: JsonInt | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="Every message of the batch: deliver_after_ms (a message's own wins).",
    )
    deliver_at: TimestampMs | None = Field(
        default=None, description="Every message of the batch: deliver_at (a message's own wins)."
    )


SEND_MESSAGE_DICTS: Final = TypeAdapter(validated_dicts(SendMessage))
"""Validates a message as :class:`SendMessage` does, to a plain dict (fields it leaves out
are :data:`SEND_MESSAGE_DEFAULTS`)."""
SEND_BATCH_DICTS: Final = TypeAdapter(
    validated_dicts(SendBatch, {"messages": list[validated_dicts(SendMessage)]})  # type: ignore[misc]
)
"""Validates a batch as :class:`SendBatch` does, to plain dicts (no model per message)."""
SEND_MESSAGE_DEFAULTS: Final = {
    name: field.get_default(call_default_factory=True)
    for name, field in SendMessage.model_fields.items()
}
"""Each :class:`SendMessage` field's default (one shared ``[]`` and ``{}``: read only)."""


class SendReceiptOut(ResponseBody):
    """Where one message was stored. Every field is always sent."""

    msg_id: str = Field(description="offsetMsgId: GET /v1/messages/{msg_id} finds it.")
    uniq_key: str = Field(description="Client-style id (UNIQ_KEY property).")
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_timestamp: int = Field(description="Milliseconds since the epoch.")
    status: Literal[
        "PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE"
    ] = Field(
        default="PUT_OK",
        description=(
            "FLUSH_DISK_TIMEOUT (SYNC_FLUSH only): stored, but not confirmed on disk in time; "
            "it becomes visible once flushed. With sync replication: FLUSH_SLAVE_TIMEOUT, "
            "stored on the master but not acknowledged by every in-sync slave in time; "
            "SLAVE_NOT_AVAILABLE, stored on the master while no slave is in sync."
        ),
    )
    delay_level: int = Field(default=0, description="The delay level used; 0 if not delayed.")
    deliver_at: int | None = Field(
        default=None,
        description=(
            "Delayed and timer messages: when they become visible (ms since the epoch). Their "
            "queue_offset is -1 until then."
        ),
    )
    timer_handle: str | None = Field(
        default=None,
        description=(
            "Timer messages: DELETE /v1/topics/{topic}/timers/{timer_handle} cancels it "
            "until it is delivered."
        ),
    )


class SendResponse(ResponseBody):
    topic: str
    messages: list[SendReceiptOut]


def send_response_out(sent: Sent) -> dict[str, object]:
    """A send's answer as JSON values: its topic and a receipt per message."""
    # Each receipt unpacked in the loop header: one step per receipt, no attribute lookups.
    return {
        "topic": sent.topic,
        "messages": [
            {
                "msg_id": msg_id,
                "uniq_key": uniq_key,
                "queue_id": queue_id,
                "queue_offset": queue_offset,
                "commit_log_offset": commit_log_offset,
                "store_timestamp": store_timestamp,
                "status": status,
                "delay_level": delay_level,
                "deliver_at": deliver_at,
                "timer_handle": timer_handle,
            }
            for (
                msg_id,
                uniq_key,
                _topic,
                queue_id,
                queue_offset,
                commit_log_offset,
                store_timestamp,
                status,
                delay_level,
                deliver_at,
                _replayed,
                timer_handle,
            ) in sent
        ],
    }


class RawSendQuery(BaseModel):
    """Query parameters of a raw-body send (they describe the one message)."""

    tags: ShortText | None = Field(default=None, description="Raw body only: its tag.")
    keys: list[MessageKey] | None = Field(
        default=None, max_length=MAX_KEYS, description=f"Raw body only: its keys. {KEY_RULES}"
    )
    properties: list[str] | None = Field(
        default=None,
        alias="property",
        max_length=MAX_PROPERTIES,
        description="Raw body only: a property as `name=value`; repeat for more.",
    )
    queue_id: ParamInt | None = Field(
        default=None, ge=0, lt=MAX_QUEUES, description="Raw body only: the queue."
    )
    sharding_key: ShortText | None = Field(
        default=None, description="Raw body only: the sharding key."
    )
    delay_level: ParamInt | None = Field(
        default=None, ge=0, le=MAX_DELAY_LEVEL, description="Raw body only: the delay level."
    )
    deliver_after_ms: ParamInt | None = Field(
        default=None,
        ge=0,
        le=INT64_MAX,
        description="Raw body only: a timer message, delivered this many ms after the send.",
    )
    deliver_at: TimestampMs | None = Field(
        default=None, description="Raw body only: a timer message, delivered at this time."
    )


# ==================================================================== reading a send's body


class SendRequest(NamedTuple):
    """What a send's body asks to store: its messages, and a batch's queue or sharding key."""

    messages: list[OutgoingMessage]
    queue_id: int | None = None
    sharding_key: str | None = None


def json_send(body: bytes) -> SendRequest:
    """A JSON body: one message (:class:`SendMessage`) or a batch (:class:`SendBatch`).

    The body is validated straight from its bytes by the model it looks like; what that
    refuses is parsed (MALFORMED_JSON when it is no JSON) and validated by the model it is —
    a batch when it has ``messages`` — whose errors are the answer (422, under ``body``).
    """
    batch = body.find(b'"messages"') >= 0
    try:
        data = (SEND_BATCH_DICTS if batch else SEND_MESSAGE_DICTS).validate_json(body)
    except ValidationError:
        batch, data = _validated_as_it_is(body)
    if not batch:
        return SendRequest([outgoing(data, ("body",))])
    timed = {k: data[k] for k in _BATCH_TIMES if data.get(k) is not None}
    return SendRequest(
        _batch_messages(data["messages"], timed), data.get("queue_id"), data.get("sharding_key")
    )


def _validated_as_it_is(body: bytes) -> tuple[bool, dict[str, Any]]:
    """Whether the body is a batch, and the body validated by its model (see
    :func:`json_send`)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ApiError("MALFORMED_JSON", "the request body is not valid JSON") from None
    batch = isinstance(parsed, dict) and "messages" in parsed
    try:
        validated: dict[str, Any] = (
            SEND_BATCH_DICTS if batch else SEND_MESSAGE_DICTS
        ).validate_python(parsed)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None
    return batch, validated


_BATCH_TIMES: Final = ("deliver_at", "deliver_after_ms")
_BODY_OF: Final = operator.itemgetter("body")


def _batch_messages(messages: list[dict[str, Any]], timed: dict[str, Any]) -> list[OutgoingMessage]:
    """The OutgoingMessages of a validated batch; ``timed``: the batch's own delivery time,
    for every message without one of its own."""
    if not timed and _bodies_alone(messages):  # the common batch: no fields to read
        return [OutgoingMessage(body) for body in map(str.encode, map(_BODY_OF, messages))]
    return [
        outgoing(m if not timed or _has_time(m) else {**m, **timed}, ("body", "messages", i))
        for i, m in enumerate(messages)
    ]


def _has_time(message: Mapping[str, Any]) -> bool:
    return any(message.get(k) is not None for k in _BATCH_TIMES)


def _bodies_alone(messages: list[dict[str, Any]]) -> bool:
    """Whether each validated message gives its body and nothing else (C calls only: this
    looks at every message of a batch)."""
    return list(map(len, messages)).count(1) == len(messages) and all(
        map(operator.contains, messages, itertools.repeat("body"))
    )


def outgoing(message: Mapping[str, Any], loc: tuple[str | int, ...]) -> OutgoingMessage:
    """What the send service takes for one validated message (its fields by name; those it
    leaves out have their defaults). INVALID_BODY_ENCODING for a base64 body that is not."""
    if len(message) == 1 and "body" in message:
        return OutgoingMessage(message["body"].encode())
    fields = {**SEND_MESSAGE_DEFAULTS, **message}
    text: str = fields["body"]
    try:
        body = (
            base64.b64decode(text, validate=True)
            if fields["body_encoding"] == "base64"
            else text.encode()
        )
    except (binascii.Error, ValueError) as exc:
        where = ".".join(map(str, loc))
        raise ApiError(
            "INVALID_BODY_ENCODING", f"{where}.body is not valid {fields['body_encoding']}: {exc}"
        ) from None
    return OutgoingMessage(
        body,
        fields["tags"],
        tuple(fields["keys"]),
        fields["properties"],
        fields["queue_id"],
        fields["sharding_key"],
        fields["delay_level"],
        fields["deliver_after_ms"],
        fields["deliver_at"],
    )


FORM_MEDIA_TYPES: Final = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def raw_send(content_type: str, body: bytes, query: RawSendQuery) -> SendRequest:
    """A raw body: one message, described by the query. Never a form (curl's ``-d`` without a
    content type, which would store JSON text as the body), never empty (a
    ``--data-binary @file`` that missed)."""
    if content_type.split(";", 1)[0].strip().lower() in FORM_MEDIA_TYPES:
        raise ApiError(
            "UNSUPPORTED_MEDIA_TYPE",
            f"a form body (Content-Type {content_type!r}) is not a message: send JSON with "
            "Content-Type: application/json, or a raw body with --data-binary and another "
            "Content-Type (application/octet-stream, text/plain, ...)",
        )
    if not body:
        raise ApiError(
            "MESSAGE_ILLEGAL", "the raw body is empty: a message needs a body (is the file there?)"
        )
    message = OutgoingMessage(
        body,
        query.tags,
        tuple(query.keys or ()),
        _properties(query.properties or []),
        query.queue_id,
        query.sharding_key,
        query.delay_level or 0,
        query.deliver_after_ms,
        query.deliver_at,
    )
    return SendRequest([message])


def _properties(items: list[str]) -> dict[str, str]:
    properties = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ApiError(
                "PARAMETER_NOT_ALLOWED", f"a property parameter is name=value, not {item!r}"
            )
        properties[name] = value
    return properties

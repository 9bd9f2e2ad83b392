"""Messages: send (JSON or raw body), pull from one queue, look one up by id."""

from __future__ import annotations

import base64
import binascii
import itertools
import operator
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Final

import orjson
from fastapi import APIRouter, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.responses import Response

from app.deps import BrokerDep, SettingsDep, born_host, disconnect_watch
from app.errors import ApiError, is_json_media_type
from app.labels import on_pull, on_send, requested
from app.responses import OrjsonResponse, problems
from app.routes.idempotency import (
    IDEMPOTENCY_KEY_PARAMETER,
    REPLAYED_HEADERS,
    idempotency_key,
    send_responses,
)
from app.routes.params import BodyEncodingQuery, QueueIdPath, TopicPath
from app.schemas import (
    KeyQuery,
    MessageListResponse,
    MessageOut,
    PullLimits,
    PullQuery,
    PullResponse,
    RawSendQuery,
    SendBatch,
    SendMessage,
    SendResponse,
    message_out,
    pull_out,
    send_response_out,
    sent_bodies_json,
)
from app.schemas.common import MAX_BATCH_MESSAGES, MAX_QUEUES
from app.schemas.messages import SEND_BATCH_DICTS, SEND_MESSAGE_DEFAULTS
from app.settings import MAX_REQUEST_BYTES
from services import Broker, OutgoingMessage, PullOptions, SendReceipt, SentBodies
from services.cluster import ClusterLabels

router = APIRouter(tags=["messages"])

SEND_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "description": (
        "A JSON message (`SendMessage`) or batch (`SendBatch`, atomic, one queue, consecutive "
        "offsets). Any other content type (or none) is the raw body of one message, described "
        "by the query parameters (`curl --data-binary @file`); it may not be empty (400 "
        "MESSAGE_ILLEGAL). A form (`application/x-www-form-urlencoded`, what `curl -d` sends "
        "without a content type, or `multipart/form-data`) is refused: 415 "
        f"UNSUPPORTED_MEDIA_TYPE. At most {MAX_REQUEST_BYTES} bytes."
    ),
    "content": {
        "application/json": {
            "schema": {
                "oneOf": [
                    {"$ref": "#/components/schemas/SendMessage"},
                    {"$ref": "#/components/schemas/SendBatch"},
                ]
            }
        },
        "application/octet-stream": {
            "schema": {"type": "string", "format": "binary", "maxLength": MAX_REQUEST_BYTES}
        },
    },
}


@router.post(
    "/v1/topics/{topic}/messages",
    operation_id="sendMessages",
    summary="Send one message or an atomic batch",
    status_code=201,
    response_model=SendResponse,
    responses=send_responses(problems(400, 403, 404, 413, 422, 501, 503)),
    openapi_extra={
        "requestBody": SEND_REQUEST_BODY,
        "parameters": [IDEMPOTENCY_KEY_PARAMETER],
    },
)
async def send_messages(
    topic: TopicPath,
    query: Annotated[RawSendQuery, Query()],
    broker: BrokerDep,
    request: Request,
) -> Response:
    key = idempotency_key(request)
    labels = requested(request, topic)
    body = await request.body()
    batch_queue_id: int | None = None
    batch_sharding_key: str | None = None
    content_type = request.headers.get("content-type", "")
    if is_json_media_type(content_type):
        if query.given():
            raise ApiError(
                "PARAMETER_NOT_ALLOWED",
                "tags, keys, property, queue_id and sharding_key query parameters describe a "
                "raw body; with JSON put them in the message",
            )
        batch = _text_batch(body)
        if batch is None:
            batch = _json_messages(_parse_send_json(body))
        given, batch_queue_id, batch_sharding_key = batch
        if isinstance(given, _Bodies):  # bodies alone
            bodies = given.bodies
            if len(bodies) > 1:
                return await _send_bodies(
                    topic, bodies, batch_queue_id, batch_sharding_key, broker, request, key, labels
                )
            given = given.messages()
        messages = given
    else:
        _check_raw_body(content_type, body)
        messages = [
            OutgoingMessage(
                body=body,
                tags=query.tags,
                keys=tuple(query.keys or ()),
                properties=_parse_properties(query.properties or []),
                queue_id=query.queue_id,
                sharding_key=query.sharding_key,
                delay_level=query.delay_level or 0,
                deliver_after_ms=query.deliver_after_ms,
                deliver_at=query.deliver_at,
            )
        ]
    receipts = await broker.send.send(
        topic,
        messages,
        batch_queue_id=batch_queue_id,
        batch_sharding_key=batch_sharding_key,
        born_host=born_host(request),
        idempotency_key=key,
    )
    headers = REPLAYED_HEADERS if receipts[0].replayed else None
    out = send_response_out(topic, receipts)
    if labels is not None:
        out = on_send(out, labels)
    return OrjsonResponse(out, status_code=201, headers=headers)


FORM_MEDIA_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})


def _check_raw_body(content_type: str, body: bytes) -> None:
    """A raw body is sent on purpose: never a form (curl's ``-d`` without a content type, which
    would store JSON text as the body), never empty (a ``--data-binary @file`` that missed)."""
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


def _parse_send_json(body: bytes) -> SendMessage | SendBatch:
    """The JSON body as a message or a batch: the models are the one rulebook.

    The body is first validated straight from its bytes by the model it looks like (pydantic
    parses the JSON itself, a third faster for a batch than orjson + validating the parsed
    value); whatever that refuses goes the exact way below, so every error is the one that
    way answers: MALFORMED_JSON for what orjson cannot parse (a lone surrogate, a BOM, bad
    UTF-8), else the model's 422 for the parsed value, by whether it has ``messages``.
    """
    guess: type[SendMessage] | type[SendBatch] = SendBatch if b'"messages"' in body else SendMessage
    try:
        return guess.model_validate_json(body)
    except ValidationError:
        pass
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise ApiError("MALFORMED_JSON", "the request body is not valid JSON") from None
    model: type[SendMessage] | type[SendBatch] = SendMessage
    if isinstance(data, dict) and "messages" in data:
        model = SendBatch
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        raise RequestValidationError(errors) from None


def _json_messages(
    parsed: SendMessage | SendBatch,
) -> tuple[list[OutgoingMessage], int | None, str | None]:
    """What a validated JSON body sends: its messages, the batch's queue and sharding key."""
    if isinstance(parsed, SendBatch):
        timed = [_batch_timed(m, parsed) for m in parsed.messages]
        return _batch_outgoing(timed), parsed.queue_id, parsed.sharding_key
    return [outgoing_message(parsed, ("body",))], None, None


class _Bodies:
    """The messages of a batch of bodies alone, as their bodies."""

    __slots__ = ("bodies",)

    def __init__(self, bodies: list[bytes]) -> None:
        self.bodies = bodies

    def messages(self) -> list[OutgoingMessage]:
        return [OutgoingMessage(body) for body in self.bodies]


async def _send_bodies(
    topic: str,
    bodies: list[bytes],
    queue_id: int | None,
    sharding_key: str | None,
    broker: Broker,
    request: Request,
    key: str | None,
    labels: ClusterLabels | None,
) -> Response:
    """The answer to a batch of bodies alone, sent and answered as columns (``send_bodies``,
    ``send_bodies_once`` with an idempotency key): the records and the answer of the general
    way, without an object per message. A replayed keyed send is answered as the general way
    answers it."""
    send = broker.send
    sent: SentBodies | list[SendReceipt]
    if key is None:
        sent = await send.send_bodies(
            topic,
            bodies,
            batch_queue_id=queue_id,
            batch_sharding_key=sharding_key,
            born_host=born_host(request),
        )
    else:
        sent = await send.send_bodies_once(
            topic,
            bodies,
            key,
            batch_queue_id=queue_id,
            batch_sharding_key=sharding_key,
            born_host=born_host(request),
        )
        if isinstance(sent, list):
            out = send_response_out(topic, sent)
            if labels is not None:
                out = on_send(out, labels)
            return OrjsonResponse(out, status_code=201, headers=REPLAYED_HEADERS)
    content = sent_bodies_json(sent) if labels is None else None
    if content is None:
        out = send_response_out(topic, sent.receipts())
        content = orjson.dumps(out if labels is None else on_send(out, labels))
    return Response(content, status_code=201, media_type=OrjsonResponse.media_type)


TextBatch = tuple[list[OutgoingMessage] | _Bodies, int | None, str | None]


def _text_batch(body: bytes) -> TextBatch | None:
    """A batch of text messages, validated by :data:`SEND_BATCH_DICTS` (the batch's rules,
    without a model per message): its messages (bodies alone: their bodies), queue and
    sharding key; None for anything else (not a batch, a base64 body, a timer message, a
    refusal), which goes the way of :func:`_parse_send_json`. A timer message is told from
    the validated fields, not by scanning the whole body for them. A batch whose first
    message is a body alone is tried as a batch of bodies alone first (:func:`_bodies_batch`)."""
    at = body.find(b'"messages"')
    if at < 0:
        return None
    if _first_is_body_alone(body, at):
        bodies = _bodies_batch(body)
        if bodies is not None:
            return bodies
    return _validated_text_batch(body)


def _first_is_body_alone(body: bytes, messages_at: int) -> bool:
    """Whether the first message looks like ``{"body": "..."}`` (one name in it): only a
    guess, which decides whether :func:`_bodies_batch` is worth a try."""
    start = body.find(b"{", messages_at)
    return start >= 0 and body.count(b'":', start, body.find(b"}", start)) == 1


_BODIES_BATCH_FIELDS: Final = frozenset({"messages", "queue_id"})


def _bodies_batch(body: bytes) -> TextBatch | None:
    """A batch of bodies alone (``{"messages": [{"body": "..."}, ...]}``, perhaps with a
    ``queue_id``), parsed by orjson and held to the rules :data:`SEND_BATCH_DICTS` applies
    to that shape (1 to MAX_BATCH_MESSAGES messages, a text body of at most
    MAX_REQUEST_BYTES characters each, an integer queue id in range or null): pydantic's
    parse builds the same dicts at a higher cost. None for anything else, even what the
    rules accept (a whole float queue id, another field), which they then validate."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not dict or not _BODIES_BATCH_FIELDS.issuperset(data):
        return None
    messages = data.get("messages")
    if type(messages) is not list or not 0 < len(messages) <= MAX_BATCH_MESSAGES:
        return None
    if list(map(type, messages)).count(dict) != len(messages) or not _bodies_alone(messages):
        return None
    texts = list(map(_BODY_OF, messages))
    if list(map(type, texts)).count(str) != len(texts) or max(map(len, texts)) > MAX_REQUEST_BYTES:
        return None
    queue_id = data.get("queue_id")
    if queue_id is not None and (type(queue_id) is not int or not 0 <= queue_id < MAX_QUEUES):
        return None
    return _Bodies(list(map(str.encode, texts))), queue_id, None


def _validated_text_batch(body: bytes) -> TextBatch | None:
    """:func:`_text_batch` by :data:`SEND_BATCH_DICTS`."""
    try:
        batch = SEND_BATCH_DICTS.validate_json(body)
    except ValidationError:
        return None
    if not _BATCH_TIMES.isdisjoint(batch):  # the batch's own delivery time
        return None
    given = batch["messages"]
    if _bodies_alone(given):  # the common batch: no defaults to merge, no fields to copy
        bodies = _Bodies(list(map(str.encode, map(_BODY_OF, given))))
        return bodies, batch.get("queue_id"), batch.get("sharding_key")
    items = [{**SEND_MESSAGE_DEFAULTS, **m} for m in given]
    if any(_not_plain_text(m) for m in items):
        return None
    messages = [
        OutgoingMessage(
            m["body"].encode(),
            m["tags"],
            tuple(m["keys"]),
            m["properties"],
            m["queue_id"],
            m["sharding_key"],
            m["delay_level"],
            m["deliver_after_ms"],
        )
        for m in items
    ]
    return messages, batch.get("queue_id"), batch.get("sharding_key")


_BATCH_TIMES: Final = frozenset({"deliver_at", "deliver_after_ms"})
_BODY_OF: Final = operator.itemgetter("body")


def _not_plain_text(message: dict[str, Any]) -> bool:
    """Whether a validated message (defaults merged) is base64 or a timer message: the
    model way sends those."""
    return (
        message["body_encoding"] != "utf-8"
        or message["deliver_at"] is not None
        or message["deliver_after_ms"] is not None
    )


def _bodies_alone(messages: list[dict[str, Any]]) -> bool:
    """Whether each validated message gives its body and nothing else (C calls only: this
    looks at every message of a batch)."""
    return list(map(len, messages)).count(1) == len(messages) and all(
        map(operator.contains, messages, itertools.repeat("body"))
    )


def outgoing_message(message: SendMessage, loc: tuple[str | int, ...]) -> OutgoingMessage:
    """What the send service takes for one validated message (built positionally: this runs
    for every message of a batch)."""
    try:
        if message.body_encoding == "base64":
            body = base64.b64decode(message.body, validate=True)
        else:
            body = message.body.encode()
    except (binascii.Error, ValueError) as exc:
        where = ".".join(map(str, loc))
        raise ApiError(
            "INVALID_BODY_ENCODING", f"{where}.body is not valid {message.body_encoding}: {exc}"
        ) from None
    return OutgoingMessage(
        body,
        message.tags,
        tuple(message.keys),
        message.properties,
        message.queue_id,
        message.sharding_key,
        message.delay_level,
        message.deliver_after_ms,
        message.deliver_at,
    )


def _batch_timed(message: SendMessage, batch: SendBatch) -> SendMessage:
    """A batch message with the batch's delivery time, unless it has its own."""
    if message.deliver_at is not None or message.deliver_after_ms is not None:
        return message
    if batch.deliver_at is None and batch.deliver_after_ms is None:
        return message
    return message.model_copy(
        update={"deliver_at": batch.deliver_at, "deliver_after_ms": batch.deliver_after_ms}
    )


def _batch_outgoing(messages: list[SendMessage]) -> list[OutgoingMessage]:
    """:func:`outgoing_message` of each message of a batch; text bodies, the common case, in one
    comprehension (a body the models accepted as text always encodes)."""
    if any(m.body_encoding != "utf-8" for m in messages):
        return [outgoing_message(m, ("body", "messages", i)) for i, m in enumerate(messages)]
    return [
        OutgoingMessage(
            m.body.encode(),
            m.tags,
            tuple(m.keys),
            m.properties,
            m.queue_id,
            m.sharding_key,
            m.delay_level,
            m.deliver_after_ms,
            m.deliver_at,
        )
        for m in messages
    ]


def _parse_properties(items: list[str]) -> dict[str, str]:
    properties = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ApiError(
                "PARAMETER_NOT_ALLOWED", f"a property parameter is name=value, not {item!r}"
            )
        properties[name] = value
    return properties


@router.get(
    "/v1/topics/{topic}/queues/{queue_id}/messages",
    operation_id="pullMessages",
    summary="Pull from one queue, long-polling when there is nothing",
    response_model=PullResponse,
    responses=problems(400, 403, 404, 409, 422, 429, 503),
)
async def pull_messages(
    topic: TopicPath,
    queue_id: QueueIdPath,
    query: Annotated[PullQuery, Query()],
    broker: BrokerDep,
    request: Request,
) -> Response:
    options, abandon = long_poll(query, request)
    labels = requested(request, topic)
    pulled = await broker.pull.pull_queue(
        topic,
        queue_id,
        query.offset,
        options,
        group=query.group,
        commit_offset=query.commit_offset,
        abandon=abandon,
    )
    out = pull_out(pulled, query.body_encoding)
    if labels is not None:
        on_pull(out, labels)
    return OrjsonResponse(out)


def long_poll(
    query: PullLimits, request: Request
) -> tuple[PullOptions, Callable[[], Awaitable[None]] | None]:
    """What a pull's query asks for (the limits every pull shares), and what ends its long
    poll early when the client goes away (nothing to watch without a wait)."""
    wait_ms = query.wait_ms
    options = PullOptions(query.max_messages, query.max_bytes, query.tags, wait_ms)
    return options, disconnect_watch(request) if wait_ms else None


@router.get(
    "/v1/topics/{topic}/messages",
    operation_id="queryMessagesByKey",
    summary="Messages of a topic with a business key (KEYS) or a UNIQ_KEY",
    description="Found through the IndexFile, oldest first; an unknown key is an empty list.",
    response_model=MessageListResponse,
    responses=problems(400, 404, 422, 503),
)
async def query_messages_by_key(
    topic: TopicPath,
    query: Annotated[KeyQuery, Query()],
    broker: BrokerDep,
    settings: SettingsDep,
    request: Request,
) -> Response:
    found = broker.messages.by_key(
        topic,
        query.key,
        max_messages=query.max_messages,
        begin=query.begin_timestamp,
        end=query.end_timestamp,
        max_bytes=settings.max_pull_bytes,
    )
    messages = [message_out(m, query.body_encoding) for m in found]
    labels = requested(request, topic)
    if labels is not None:
        labels.relabel(messages, tag=False)
    return OrjsonResponse({"topic": topic, "messages": messages})


@router.get(
    "/v1/messages/{msg_id}",
    operation_id="getMessage",
    summary="One message by its msg_id",
    response_model=MessageOut,
    responses=problems(400, 404, 422, 503),
)
async def get_message(
    msg_id: Annotated[
        str,
        Path(
            description="The offsetMsgId a send returned (32 hex characters; 56 for IPv6).",
            json_schema_extra={"pattern": "^([0-9A-Fa-f]{32}|[0-9A-Fa-f]{56})$"},
        ),
    ],
    broker: BrokerDep,
    body_encoding: BodyEncodingQuery = "auto",
) -> Response:
    return OrjsonResponse(message_out(broker.messages.by_id(msg_id), body_encoding))

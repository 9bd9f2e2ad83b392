"""Messages: send (JSON or raw body), pull from one queue, read a range of its records, look
one up by id."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.deps import (
    BrokerDep,
    SettingsDep,
    born_host,
    disconnect_watch,
    header,
    note_consumer,
    read_body,
)
from app.errors import ApiError, is_json_media_type
from app.labels import on_pull, on_send, requested
from app.responses import BytesResponse, OrjsonResponse
from app.routes.idempotency import (
    IDEMPOTENCY_KEY_PARAMETER,
    REPLAYED_HEADERS,
    SEND_RESPONSES,
    idempotency_key,
)
from app.routes.params import BodyEncodingQuery, MessageIdPath, QueueIdPath, TopicPath
from app.schemas import (
    KeyQuery,
    MessageListResponse,
    MessageOut,
    PullLimits,
    PullQuery,
    PullResponse,
    RawSendQuery,
    SendResponse,
    message_out,
    pull_out,
    send_response_out,
    sent_json,
)
from app.schemas.messages import (
    RECORDS_MEDIA_TYPE,
    RECORDS_RESPONSES,
    RecordsQuery,
    records_headers,
)
from app.schemas.send import json_send, raw_send
from app.settings import MAX_REQUEST_BYTES
from services import PullOptions, Sent
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
            "schema": {
                "type": "string",
                "format": "binary",
                "minLength": 1,
                "maxLength": MAX_REQUEST_BYTES,
            }
        },
    },
}


@router.post(
    "/v1/topics/{topic}/messages",
    operation_id="sendMessages",
    summary="Send one message or an atomic batch",
    status_code=201,
    response_model=SendResponse,
    responses=SEND_RESPONSES,
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
    body = await read_body(request)
    content_type = header(request, b"content-type")
    if is_json_media_type(content_type):
        if query.model_fields_set:
            raise ApiError(
                "PARAMETER_NOT_ALLOWED",
                "tags, keys, property, queue_id and sharding_key query parameters describe a "
                "raw body; with JSON put them in the message",
            )
        asked = json_send(body)
    else:
        asked = raw_send(content_type, body, query)
    sent = await broker.send.send(
        topic,
        asked.messages,
        batch_queue_id=asked.queue_id,
        batch_sharding_key=asked.sharding_key,
        born_host=born_host(request),
        idempotency_key=key,
    )
    return send_answer(sent, labels, broker.replica.epoch)


def send_answer(sent: Sent, labels: ClusterLabels | None, epoch: int) -> Response:
    """201 and the receipts (labelled for the cluster where a proxy asks); the master's
    ``epoch`` in a header, and a replay of a keyed send says so in another."""
    headers = {"Spoolmq-Epoch": str(epoch)}
    if sent.replayed:
        headers.update(REPLAYED_HEADERS)
    if sent.listed is None and len(sent) > 1:
        content = sent_json(sent, labels)  # the usual batch: from the put's columns
        if content is not None:
            return BytesResponse(content, 201, headers, OrjsonResponse.media_type)
    out = send_response_out(sent)
    if labels is not None:
        out = on_send(out, labels)
    return OrjsonResponse(out, status_code=201, headers=headers)


@router.get(
    "/v1/topics/{topic}/queues/{queue_id}/messages",
    operation_id="pullMessages",
    summary="Pull from one queue, long-polling when there is nothing",
    response_model=PullResponse,
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
    note_consumer(request)
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


@router.get(
    "/v1/topics/{topic}/queues/{queue_id}/records",
    operation_id="readQueueRecords",
    summary="Read a range of one queue's records as the CommitLog stores them",
    description="A scan's read (Kafka's fetch): the queue's records from `offset` on, in "
    "RocketMQ's record layout, up to `max_bytes` rather than a pull's 32 messages, with the "
    "next offset and the queue's min and max offsets in headers. The rules are a pull's: the "
    "topic must be readable, the tag and SQL92 filters apply (what fails them is skipped and "
    "counted in the next offset), timer and transaction system copies are never in a topic's "
    "queue, and an offset retention removed answers `OFFSET_TOO_SMALL` (an empty body). With "
    "`wait_ms` it long-polls as a pull does; without, `OFFSET_OVERFLOW_ONE` says there is "
    "nothing yet.",
    response_class=Response,
    responses=RECORDS_RESPONSES,
)
async def read_queue_records(
    topic: TopicPath,
    queue_id: QueueIdPath,
    query: Annotated[RecordsQuery, Query()],
    broker: BrokerDep,
    request: Request,
) -> Response:
    read = await broker.records.read_records(
        topic,
        queue_id,
        query.offset,
        query.max_bytes,
        tags=query.tags,
        sql=query.filter,
        end_offset=query.end_offset,
        group=query.group,
        wait_ms=query.wait_ms,
        abandon=disconnect_watch(request) if query.wait_ms else None,
    )
    headers = records_headers(
        read.status.value, read.next_offset, read.min_offset, read.max_offset, read.count
    )
    return BytesResponse(read.records, 200, headers, RECORDS_MEDIA_TYPE)


def long_poll(
    query: PullLimits, request: Request
) -> tuple[PullOptions, Callable[[], Awaitable[None]] | None]:
    """What a pull's query asks for (the limits every pull shares), and what ends its long
    poll early when the client goes away (nothing to watch without a wait)."""
    wait_ms = query.wait_ms
    options = PullOptions(query.max_messages, query.max_bytes, query.tags, wait_ms, query.filter)
    return options, disconnect_watch(request) if wait_ms else None


@router.get(
    "/v1/topics/{topic}/messages",
    operation_id="queryMessagesByKey",
    summary="Messages of a topic with a business key (KEYS) or a UNIQ_KEY",
    description="Found through the IndexFile, oldest first; an unknown key is an empty list.",
    response_model=MessageListResponse,
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
        labels.apply(messages, tag=False)
    return OrjsonResponse({"topic": topic, "messages": messages})


@router.get(
    "/v1/messages/{msg_id}",
    operation_id="getMessage",
    summary="One message by its msg_id",
    response_model=MessageOut,
)
async def get_message(
    msg_id: MessageIdPath,
    broker: BrokerDep,
    body_encoding: BodyEncodingQuery = "auto",
) -> Response:
    return OrjsonResponse(message_out(broker.messages.by_id(msg_id), body_encoding))

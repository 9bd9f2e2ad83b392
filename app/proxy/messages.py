"""Proxy endpoints for messages: send to the right master, pull one cluster-wide queue or read
a range of its records (passed on as the broker stored them), and look messages up by id or
key across groups."""

from __future__ import annotations

import functools
from typing import Any, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.deps import read_body
from app.errors import ApiError, is_json_media_type
from app.proxy.bodies import JsonSend
from app.proxy.context import (
    DEFAULT_MAX_MESSAGES,
    cluster_view,
    forwarder,
    int_param,
    params_without,
    proxy_of,
    query_items,
    query_param,
)
from app.proxy.fanout import read_every_group
from app.proxy.forward import BrokerAnswer, ProxyError, broker_path, long_poll_timeout
from app.proxy.schemas import ClusterQueueIdPath, ClusterSendResponse, forwarded_query
from app.proxy.sending import SendTarget, forward_send
from app.responses import OrjsonResponse
from app.routes.idempotency import (
    IDEMPOTENCY_KEY_PARAMETER,
    SEND_RESPONSES,
    idempotency_key,
)
from app.routes.messages import SEND_REQUEST_BODY
from app.routes.params import BodyEncodingQuery, MessageIdPath, TopicPath
from app.schemas import (
    KeyQuery,
    MessageListResponse,
    MessageOut,
    PullQuery,
    PullResponse,
    RawSendQuery,
)
from app.schemas.messages import RECORDS_RESPONSES, RecordsQuery
from services.cluster import (
    ClusterLabels,
    NoMasterError,
    master_of,
    queue_route,
    readers,
    topic_route,
)

router = APIRouter(tags=["messages"])


# ================================================================ send


@router.post(
    "/v1/topics/{topic}/messages",
    operation_id="sendMessages",
    summary="Send one message or an atomic batch to the master of the queue's group",
    description=(
        "The queue is cluster-wide: `queue_id`, a `sharding_key`, or the proxy's pick among "
        "the queues of groups with a master. Sent at most once: a send whose answer was lost "
        "is retried with an Idempotency-Key (the client's, or one the proxy makes), and when "
        "no broker confirms it in time the answer is 504 OUTCOME_UNKNOWN, naming the key to "
        "retry with."
    ),
    status_code=201,
    response_model=ClusterSendResponse,
    responses=SEND_RESPONSES,
    openapi_extra={
        "requestBody": SEND_REQUEST_BODY,
        "parameters": [*forwarded_query(RawSendQuery), IDEMPOTENCY_KEY_PARAMETER],
    },
)
async def send(topic: TopicPath, request: Request) -> Response:
    """Pick the cluster-wide queue, send to its group's master with the local id, at most
    once (:mod:`app.proxy.sending`)."""
    raw = await read_body(request)
    content_type, keyed = send_headers(request.scope["headers"])
    client_key = idempotency_key(request) if keyed else None
    if is_json_media_type(content_type):  # the broker's own rule
        if request.scope["query_string"] and any(
            name in RAW_SEND_PARAMETERS for name, _ in query_items(request)
        ):
            raise ApiError("PARAMETER_NOT_ALLOWED", RAW_PARAMETERS_WITH_JSON)
        return await forward_send(request, json_target(topic, raw, client_key))
    explicit: int | None = int_param(request, "queue_id", -1)
    if query_param(request, "queue_id") is None:
        explicit = None
    elif explicit is not None and explicit < 0:
        raise ApiError("VALIDATION_FAILED", "queue_id is an integer of at least 0")
    params = params_without(request, "queue_id", "sharding_key")

    def query_for(local_queue_id: int) -> bytes:
        query: str = urlencode([*params, ("queue_id", str(local_queue_id))])
        return query.encode()

    sharding_key = query_param(request, "sharding_key")
    target = SendTarget(topic, explicit, sharding_key, client_key, lambda _: raw, query_for)
    return await forward_send(request, target)


RAW_SEND_PARAMETERS: Final = frozenset(
    field.alias or name for name, field in RawSendQuery.model_fields.items()
)
"""The query parameters that describe a raw body's message (a broker refuses them with JSON)."""
RAW_PARAMETERS_WITH_JSON: Final = (
    "tags, keys, property, queue_id, sharding_key and timing query parameters describe a raw "
    "body; with JSON put them in the message"
)


def json_target(topic: str, raw: bytes, client_key: str | None) -> SendTarget:
    """What a JSON send asks for (MALFORMED_JSON or VALIDATION_FAILED if it is not one)."""
    plan = JsonSend(raw)
    return SendTarget(topic, plan.queue_id, plan.sharding_key, client_key, plan.parts_for, None)


def send_headers(headers: list[tuple[bytes, bytes]]) -> tuple[str, bool]:
    """The send's Content-Type (the first, as ``request.headers`` gives it) and whether it
    carries an Idempotency-Key: one pass over the raw headers, no header object made."""
    content_type: bytes | None = None
    keyed = False
    for name, value in headers:
        if name == b"content-type":
            if content_type is None:
                content_type = value
        elif name == b"idempotency-key":
            keyed = True
    return ("" if content_type is None else content_type.decode("latin-1")), keyed


# ================================================================ reads of one queue, lookups


@router.get(
    "/v1/topics/{topic}/queues/{queue_id}/messages",
    operation_id="pullMessages",
    summary="Pull from one cluster-wide queue, long-polling when there is nothing",
    description="From the master of the queue's group, or a slave when the master does not "
    "answer (the master alone when the pull commits an offset).",
    response_model=PullResponse,
    openapi_extra={"parameters": forwarded_query(PullQuery)},
)
async def pull_queue(topic: TopicPath, queue_id: ClusterQueueIdPath, request: Request) -> Response:
    """Pull one cluster-wide queue from its group: the master, or a slave if it is down (the
    master alone when the pull commits an offset)."""
    proxy = proxy_of(request)
    view = proxy.registry.view
    route = topic_route(view, topic)
    queue = queue_route(route, queue_id)
    group = queue.group
    raw: bytes = request.scope["query_string"]
    commits = may_name(raw, b"commit_offset") and query_param(request, "commit_offset") is not None
    members = [master_of(view, group)] if commits else readers(view, group)
    wait_ms = int_param(request, "wait_ms", 0) if may_name(raw, b"wait_ms") else 0
    labels = ClusterLabels.of(route, group)
    _, answer = await proxy.forwarder.call_any(
        members,
        "GET",
        _pull_path(topic, queue.local_queue_id),
        query=raw,
        request=request,
        # a pull of one queue is labelled only where its queue ids differ
        labels=labels if labels.queue_ids else None,
        timeout_s=long_poll_timeout(wait_ms),
    )
    return answer.response()


@router.get(
    "/v1/topics/{topic}/queues/{queue_id}/records",
    operation_id="readQueueRecords",
    summary="Read a range of one cluster-wide queue's records as the CommitLog stores them",
    description="From the master of the queue's group, or a slave when the master does not "
    "answer; the records and their headers are passed on as the broker sent them (their "
    "QUEUEID is the group's own queue id).",
    response_class=Response,
    responses=RECORDS_RESPONSES,
    openapi_extra={"parameters": forwarded_query(RecordsQuery)},
)
async def read_queue_records(
    topic: TopicPath, queue_id: ClusterQueueIdPath, request: Request
) -> Response:
    """Forward a range read to the queue's group, as a pull of one queue is forwarded (its
    long poll given the time it asks for); the answer is not decoded."""
    view = cluster_view(request)
    queue = queue_route(topic_route(view, topic), queue_id)
    raw: bytes = request.scope["query_string"]
    wait_ms = int_param(request, "wait_ms", 0) if may_name(raw, b"wait_ms") else 0
    _, answer = await forwarder(request).call_any(
        readers(view, queue.group),
        "GET",
        _records_path(topic, queue.local_queue_id),
        query=raw,
        request=request,
        timeout_s=long_poll_timeout(wait_ms),
    )
    return answer.response()


@functools.lru_cache(maxsize=4096)
def _records_path(topic: str, local_queue_id: int) -> str:
    """A broker's path for a range read of one queue."""
    return broker_path("v1", "topics", topic, "queues", local_queue_id, "records")


def may_name(query: bytes, name: bytes) -> bool:
    """Whether a raw query string may hold parameter ``name``: without a percent escape a name
    is there as it is, so a query without it need not be parsed (a pull's usual case)."""
    return query.find(b"%") >= 0 or query.find(name) >= 0


@functools.lru_cache(maxsize=4096)
def _pull_path(topic: str, local_queue_id: int) -> str:
    """A broker's path for a pull of one queue (percent-encoding the topic each time cost a
    pull more than its routing)."""
    return broker_path("v1", "topics", topic, "queues", local_queue_id, "messages")


@router.get(
    "/v1/topics/{topic}/messages",
    operation_id="queryMessagesByKey",
    summary="Messages of a topic with a business key (KEYS) or a UNIQ_KEY, from every group",
    description="Every group hosting the topic is asked; the messages they found, oldest "
    "first, at most `max_messages`.",
    response_model=MessageListResponse,
    openapi_extra={"parameters": forwarded_query(KeyQuery)},
)
async def query_by_key(topic: TopicPath, request: Request) -> Response:
    """Ask every group hosting the topic; merge what they found, oldest first."""
    view = cluster_view(request)
    route = topic_route(view, topic)
    limit = int_param(request, "max_messages", DEFAULT_MAX_MESSAGES)

    answers = await read_every_group(
        forwarder(request),
        view,
        route.groups(),
        broker_path("v1", "topics", topic, "messages"),
        request=request,
        query=request.scope["query_string"],
        labels=functools.partial(ClusterLabels.of, route),
    )
    found: list[dict[str, Any]] = []
    for _, answer in answers:
        if isinstance(answer, ProxyError | NoMasterError):
            continue
        if not answer.ok:
            return answer.response()
        found.extend(answer.json().get("messages", []))
    found.sort(key=lambda m: m.get("store_timestamp", 0))
    return OrjsonResponse({"topic": topic, "messages": found[:limit]})


@router.get(
    "/v1/messages/{msg_id}",
    operation_id="getMessage",
    summary="One message by its msg_id, from the group that stored it",
    response_model=MessageOut,
)
async def get_message(
    msg_id: MessageIdPath,
    request: Request,
    body_encoding: BodyEncodingQuery = "auto",
) -> Response:
    """Ask every group for the message; the one that has it answers (``body_encoding``,
    checked here, goes to the brokers with the query string as it came)."""
    view = cluster_view(request)

    answers = await read_every_group(
        forwarder(request),
        view,
        sorted(view.groups),
        broker_path("v1", "messages", msg_id),
        request=request,
        query=request.scope["query_string"],
    )
    missing: BrokerAnswer | None = None
    for group, answer in answers:
        if isinstance(answer, ProxyError | NoMasterError):
            continue
        if answer.ok:
            out = answer.json()
            route = view.topics.get(str(out.get("topic")))
            if route is not None:  # its topic is known only now: labelled here
                ClusterLabels.of(route, group).apply([out], tag=False)
            return answer.with_body(out)
        missing = missing or answer
    if missing is None:
        raise ProxyError("MESSAGE_NOT_FOUND", f"no broker group has message {msg_id}")
    return missing.response()

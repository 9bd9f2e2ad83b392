"""Proxy endpoints for messages: send to the right master, pull one cluster-wide queue, and
look messages up by id or key across groups."""

from __future__ import annotations

import functools
from typing import Any
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
    query_param,
)
from app.proxy.fanout import all_unreachable, each_group
from app.proxy.forward import BrokerAnswer, ProxyError, broker_path, long_poll_timeout
from app.proxy.sending import SendTarget, forward_send
from app.responses import OrjsonResponse
from app.routes.idempotency import idempotency_key
from services.cluster import (
    ClusterLabels,
    NoMasterError,
    master_of,
    queue_route,
    readers,
    topic_route,
)

router = APIRouter()


# ================================================================ send


@router.post("/v1/topics/{topic}/messages", operation_id="sendMessages")
async def send(topic: str, request: Request) -> Response:
    """Pick the cluster-wide queue, send to its group's master with the local id, at most
    once (:mod:`app.proxy.sending`)."""
    raw = await read_body(request)
    content_type, keyed = send_headers(request.scope["headers"])
    client_key = idempotency_key(request) if keyed else None
    if is_json_media_type(content_type):  # the broker's own rule
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


def json_target(topic: str, raw: bytes, client_key: str | None) -> SendTarget:
    """What a JSON send asks for (MALFORMED_JSON or VALIDATION_FAILED if it is not one)."""
    plan = JsonSend(raw)
    return SendTarget(
        topic, plan.queue_id, plan.sharding_key, client_key, plan.parts_for, _no_query
    )


def _no_query(local_queue_id: int) -> bytes:
    return b""


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


@router.get("/v1/topics/{topic}/queues/{queue_id}/messages", operation_id="pullMessages")
async def pull_queue(topic: str, queue_id: int, request: Request) -> Response:
    """Pull one cluster-wide queue from its group: the master, or a slave if it is down (the
    master alone when the pull commits an offset)."""
    view = cluster_view(request)
    route = topic_route(view, topic)
    queue = queue_route(route, queue_id)
    group = queue.group
    raw: bytes = request.scope["query_string"]
    commits = may_name(raw, b"commit_offset") and query_param(request, "commit_offset") is not None
    members = [master_of(view, group)] if commits else readers(view, group)
    wait_ms = int_param(request, "wait_ms", 0) if may_name(raw, b"wait_ms") else 0
    labels = ClusterLabels.of(route, group)
    _, answer = await forwarder(request).call_any(
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


def may_name(query: bytes, name: bytes) -> bool:
    """Whether a raw query string may hold parameter ``name``: without a percent escape a name
    is there as it is, so a query without it need not be parsed (a pull's usual case)."""
    return query.find(b"%") >= 0 or query.find(name) >= 0


@functools.lru_cache(maxsize=4096)
def _pull_path(topic: str, local_queue_id: int) -> str:
    """A broker's path for a pull of one queue (percent-encoding the topic each time cost a
    pull more than its routing)."""
    return broker_path("v1", "topics", topic, "queues", local_queue_id, "messages")


@router.get("/v1/topics/{topic}/messages")
async def query_by_key(topic: str, request: Request) -> Response:
    """Ask every group hosting the topic; merge what they found, oldest first."""
    view = cluster_view(request)
    route = topic_route(view, topic)
    limit = int_param(request, "max_messages", DEFAULT_MAX_MESSAGES)

    async def ask(group: str) -> BrokerAnswer:
        _, answer = await forwarder(request).call_any(
            readers(view, group),
            "GET",
            broker_path("v1", "topics", topic, "messages"),
            query=request.scope["query_string"],
            request=request,
            labels=ClusterLabels.of(route, group),
        )
        return answer

    answers = await each_group(route.groups(), ask)
    down = all_unreachable(answers)
    if down is not None:
        raise down
    found: list[dict[str, Any]] = []
    for _, answer in answers:
        if isinstance(answer, ProxyError | NoMasterError):
            continue
        if not answer.ok:
            return answer.response()
        found.extend(answer.json().get("messages", []))
    found.sort(key=lambda m: m.get("store_timestamp", 0))
    return OrjsonResponse({"topic": topic, "messages": found[:limit]})


@router.get("/v1/messages/{msg_id}")
async def get_message(msg_id: str, request: Request) -> Response:
    """Ask every group for the message; the one that has it answers."""
    view = cluster_view(request)

    async def ask(group: str) -> BrokerAnswer:
        _, answer = await forwarder(request).call_any(
            readers(view, group),
            "GET",
            broker_path("v1", "messages", msg_id),
            query=request.scope["query_string"],
            request=request,
        )
        return answer

    answers = await each_group(sorted(view.groups), ask)
    down = all_unreachable(answers)
    if down is not None:
        raise down
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

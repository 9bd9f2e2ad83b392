"""Proxy endpoints for messages: send to the right master, pull one cluster-wide queue, and
look messages up by id or key across groups."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.errors import ApiError
from app.proxy.context import (
    DEFAULT_MAX_MESSAGES,
    all_unreachable,
    cluster_view,
    each_group,
    forwarder,
    int_param,
    json_body,
    params_without,
    route_registry,
    send_picker,
)
from app.proxy.forward import BrokerAnswer, BrokerUnreachableError, ProxyError
from app.responses import OrjsonResponse
from services.cluster import (
    EtcdUnavailableError,
    NoMasterError,
    batch_queue_id,
    batch_sharding_key,
    globalize,
    localize_send,
    master_of,
    queue_route,
    readers,
    topic_route,
)

router = APIRouter()


# ================================================================ send


@router.post("/v1/topics/{topic}/messages")
async def send(topic: str, request: Request) -> Response:
    """Pick the cluster-wide queue, send to its group's master with the local id."""
    raw = await request.body()
    is_json = request.headers.get("content-type", "").split(";")[0].strip().endswith("json")
    body = json_body(raw) if is_json else {}
    if is_json:
        explicit, key = batch_queue_id(body), batch_sharding_key(body)
    else:
        explicit = int_param(request, "queue_id", -1)
        explicit = None if explicit < 0 and "queue_id" not in request.query_params else explicit
        if explicit is not None and explicit < 0:
            raise ApiError("VALIDATION_FAILED", "queue_id is an integer of at least 0")
        key = request.query_params.get("sharding_key")
    failed: list[str] = []
    refreshed = False
    while True:
        view = cluster_view(request)
        route = topic_route(view, topic)
        queue = send_picker(request).pick(view, route, explicit, key, failed)
        try:
            master = master_of(view, queue.group)
            if is_json:
                answer = await forwarder(request).call(
                    master,
                    "POST",
                    f"/v1/topics/{topic}/messages",
                    json=localize_send(body, queue.local_queue_id),
                    headers=request.headers,
                )
            else:
                params = params_without(request, "queue_id", "sharding_key")
                params.append(("queue_id", str(queue.local_queue_id)))
                answer = await forwarder(request).call(
                    master,
                    "POST",
                    f"/v1/topics/{topic}/messages",
                    params=params,
                    content=raw,
                    headers=request.headers,
                )
        except (BrokerUnreachableError, NoMasterError):
            if explicit is not None or key is not None:
                raise
            failed.append(queue.group)
            continue
        if answer.status == 421 and not refreshed:
            refreshed = True  # the route table may be behind a failover: read it again
            try:
                await route_registry(request).refresh()
            except EtcdUnavailableError:
                return answer.response()
            continue
        if not answer.ok:
            return answer.response()
        out = answer.json()
        globalize(route, queue.group, out.get("messages", ()))
        return answer.with_body(out)


# ================================================================ reads of one queue, lookups


@router.get("/v1/topics/{topic}/queues/{queue_id}/messages")
async def pull_queue(topic: str, queue_id: int, request: Request) -> Response:
    """Pull one cluster-wide queue from its group: the master, or a slave if it is down."""
    view = cluster_view(request)
    route = topic_route(view, topic)
    queue = queue_route(route, queue_id)
    writes = "commit_offset" in request.query_params
    members = [master_of(view, queue.group)] if writes else readers(view, queue.group)
    _, answer = await forwarder(request).call_any(
        members,
        "GET",
        f"/v1/topics/{topic}/queues/{queue.local_queue_id}/messages",
        params=request.query_params.multi_items(),
        headers=request.headers,
    )
    if not answer.ok:
        return answer.response()
    out = answer.json()
    out["queue_id"] = queue_id
    globalize(route, queue.group, out.get("messages", ()))
    return answer.with_body(out)


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
            f"/v1/topics/{topic}/messages",
            params=request.query_params.multi_items(),
            headers=request.headers,
        )
        return answer

    answers = await each_group(route.groups(), ask)
    down = all_unreachable(answers)
    if down is not None:
        raise down
    found: list[dict[str, Any]] = []
    for group, answer in answers:
        if isinstance(answer, ProxyError):
            continue
        if not answer.ok:
            return answer.response()
        messages = answer.json().get("messages", [])
        globalize(route, group, messages)
        found.extend(messages)
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
            f"/v1/messages/{msg_id}",
            params=request.query_params.multi_items(),
            headers=request.headers,
        )
        return answer

    answers = await each_group(sorted(view.groups), ask)
    down = all_unreachable(answers)
    if down is not None:
        raise down
    missing: BrokerAnswer | None = None
    for group, answer in answers:
        if isinstance(answer, ProxyError):
            continue
        if answer.ok:
            out = answer.json()
            route = view.topics.get(str(out.get("topic")))
            if route is not None:
                globalize(route, group, [out])
            return answer.with_body(out)
        missing = missing or answer
    if missing is None:
        raise ProxyError("MESSAGE_NOT_FOUND", f"no broker group has message {msg_id}")
    return missing.response()

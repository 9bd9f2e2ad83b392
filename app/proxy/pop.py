"""Proxy endpoints for POP: receive from the groups that have messages, and send acks and
changes of invisibility back to the group that issued each receipt handle."""

from __future__ import annotations

import functools
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.deps import read_body
from app.errors import ApiError
from app.proxy.bodies import json_body
from app.proxy.context import budget_shares, cluster_view, forwarder
from app.proxy.fanout import first_non_empty, share_out
from app.proxy.forward import (
    BrokerAnswer,
    ProxyError,
    broker_path,
    long_poll_timeout,
)
from app.proxy.merge import merged_receive
from app.responses import BytesResponse, OrjsonResponse
from app.schemas.pop import ReceiveIn
from services.cluster import ClusterLabels, master_of, split_handle, topic_route

router = APIRouter()

RECEIVE_DEFAULT: int = ReceiveIn.model_fields["max_messages"].default


# ================================================================ POP


@router.post("/v1/groups/{group}/topics/{topic}/receive", operation_id="receiveMessages")
async def receive(group: str, topic: str, request: Request) -> Response:
    """Receive from every group hosting the topic at once, each for its share of
    ``max_messages`` (:mod:`app.proxy.fanout`); long-poll all at once when none has anything."""
    body = json_body(await read_body(request))
    view = cluster_view(request)
    route = topic_route(view, topic)
    wait_ms = body.get("wait_ms", 0)
    budget = body.get("max_messages", RECEIVE_DEFAULT)

    async def ask(name: str, max_messages: Any, wait: Any) -> BrokerAnswer:
        answer = await forwarder(request).call(
            master_of(view, name),
            "POST",
            receive_path(group, topic),
            json={**body, "max_messages": max_messages, "wait_ms": wait},
            request=request,
            labels=ClusterLabels.of(route, name),
            timeout_s=long_poll_timeout(wait),
        )
        return answer

    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 1:
        return (await ask(route.groups()[0], budget, wait_ms)).response()  # the broker says why

    found = await share_out(budget_shares(request), "pop", group, route, budget, ask)
    if found.refused is not None:
        return found.refused.response()
    answers = found.answers
    if not found.found() and isinstance(wait_ms, int) and wait_ms > 0:
        polled = await first_non_empty(route.groups(), lambda name: ask(name, budget, wait_ms))
        answers = [polled] if polled is not None else []
    return BytesResponse(merged_receive(group, topic, answers), media_type="application/json")


@functools.lru_cache(maxsize=4096)
def receive_path(group: str, topic: str) -> str:
    return broker_path("v1", "groups", group, "topics", topic, "receive")


@router.post("/v1/groups/{group}/acks")
async def ack(group: str, request: Request) -> Response:
    """Send each handle back to the group that issued it; one outcome per handle, in order."""
    body = json_body(await request.body())
    handles = body.get("receipt_handles")
    if not isinstance(handles, list) or not handles or not all(isinstance(h, str) for h in handles):
        raise ApiError("VALIDATION_FAILED", "receipt_handles is a non-empty list of strings")
    view = cluster_view(request)
    outcomes: dict[int, dict[str, Any]] = {}
    per_group: dict[str, list[tuple[int, str]]] = {}
    for index, handle in enumerate(handles):
        split = split_handle(handle)
        if split is None or split[0] not in view.groups:
            outcomes[index] = {
                "receipt_handle": handle,
                "outcome": "invalid",
                "detail": "not a receipt handle this proxy issued",
            }
        else:
            per_group.setdefault(split[0], []).append((index, split[1]))
    for name, items in per_group.items():
        answer = await forwarder(request).call(
            master_of(view, name),
            "POST",
            broker_path("v1", "groups", group, "acks"),
            json={"receipt_handles": [inner for _, inner in items]},
            request=request,
        )
        if not answer.ok:
            return answer.response()
        for (index, _), result in zip(items, answer.json()["results"], strict=True):
            outcomes[index] = {**result, "receipt_handle": handles[index]}
    return OrjsonResponse({"group": group, "results": [outcomes[i] for i in range(len(handles))]})


@router.post("/v1/groups/{group}/invisibility")
async def change_invisibility(group: str, request: Request) -> Response:
    body = json_body(await request.body())
    handle = body.get("receipt_handle")
    split = split_handle(handle) if isinstance(handle, str) else None
    view = cluster_view(request)
    if split is None or split[0] not in view.groups:
        raise ProxyError("INVALID_RECEIPT_HANDLE", "not a receipt handle this proxy issued")
    name, inner = split
    answer = await forwarder(request).call(
        master_of(view, name),
        "POST",
        broker_path("v1", "groups", group, "invisibility"),
        json={**body, "receipt_handle": inner},
        request=request,
        labels=ClusterLabels(name, "", {}),
    )
    return answer.response()

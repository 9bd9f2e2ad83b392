"""Proxy endpoints for POP: receive from whichever group has messages, and send acks and
changes of invisibility back to the group that issued each receipt handle."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.errors import ApiError
from app.proxy.context import (
    cluster_view,
    first_non_empty,
    forwarder,
    json_body,
    rotated,
)
from app.proxy.forward import BrokerAnswer, ProxyError
from app.responses import OrjsonResponse
from services.cluster import (
    NoMasterError,
    globalize,
    master_of,
    prefix_handle,
    split_handle,
    topic_route,
)

router = APIRouter()


# ================================================================ POP


@router.post("/v1/groups/{group}/topics/{topic}/receive")
async def receive(group: str, topic: str, request: Request) -> Response:
    """Receive from the groups in turn; long-poll all at once when none has anything."""
    body = json_body(await request.body())
    view = cluster_view(request)
    route = topic_route(view, topic)
    wait_ms = body.get("wait_ms", 0)

    async def ask(name: str, wait: Any) -> BrokerAnswer:
        answer = await forwarder(request).call(
            master_of(view, name),
            "POST",
            f"/v1/groups/{group}/topics/{topic}/receive",
            json={**body, "wait_ms": wait},
            headers=request.headers,
        )
        return answer

    reached = 0
    last_error: ProxyError | NoMasterError | None = None
    chosen: tuple[str, dict[str, Any]] | None = None
    for name in rotated(route.groups()):
        try:
            answer = await ask(name, 0)
        except (ProxyError, NoMasterError) as exc:
            last_error = exc
            continue
        reached += 1
        if not answer.ok:
            return answer.response()
        out = answer.json()
        if out.get("messages"):
            chosen = (name, out)
            break
    if reached == 0 and last_error is not None:
        raise last_error
    if chosen is None and isinstance(wait_ms, int) and wait_ms > 0:
        chosen = await first_non_empty(route.groups(), lambda name: ask(name, wait_ms))
    if chosen is None:
        return OrjsonResponse({"group": group, "topic": topic, "messages": []})
    name, out = chosen
    for message in out.get("messages", ()):
        message["receipt_handle"] = prefix_handle(name, message["receipt_handle"])
        message["broker_group"] = name
    globalize(route, name, out.get("messages", ()))
    return OrjsonResponse(out)


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
            f"/v1/groups/{group}/acks",
            json={"receipt_handles": [inner for _, inner in items]},
            headers=request.headers,
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
        f"/v1/groups/{group}/invisibility",
        json={**body, "receipt_handle": inner},
        headers=request.headers,
    )
    if not answer.ok:
        return answer.response()
    out = answer.json()
    if isinstance(out.get("receipt_handle"), str):
        out["receipt_handle"] = prefix_handle(name, out["receipt_handle"])
    return answer.with_body(out)

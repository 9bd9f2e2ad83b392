"""Proxy endpoints for POP: receive from the groups that have messages, and send acks and
changes of invisibility back to the group that issued each receipt handle."""

from __future__ import annotations

import functools
from collections.abc import Container
from typing import Any, Final

from fastapi import APIRouter, Request
from pydantic import BaseModel
from starlette.responses import Response

from app.deps import read_body
from app.proxy.bodies import checked_body, json_body
from app.proxy.context import budget_shares, cluster_view, forwarder
from app.proxy.fanout import (
    LONG_POLL_TURN_MS,
    Unreachable,
    each_group,
    long_poll_in_turn,
    share_out,
)
from app.proxy.forward import (
    RETRY_AFTER_S,
    BrokerAnswer,
    ProxyError,
    broker_path,
    long_poll_timeout,
)
from app.proxy.merge import merged_receive
from app.responses import BytesResponse, OrjsonResponse
from app.schemas.pop import (
    ClusterAckIn,
    ClusterAckResponse,
    ClusterInvisibilityIn,
    ClusterInvisibilityOut,
    ClusterReceiveResponse,
    ReceiveIn,
)
from services.cluster import ClusterLabels, master_of, split_handle, topic_route

router = APIRouter()

RECEIVE_DEFAULT: int = ReceiveIn.model_fields["max_messages"].default


def json_request_body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of an endpoint that reads ``model``'s JSON itself (the
    proxy passes it on; the broker validates it)."""
    return {
        "required": True,
        "content": {"application/json": {"schema": model.model_json_schema()}},
    }


# ================================================================ POP


@router.post(
    "/v1/groups/{group}/topics/{topic}/receive",
    operation_id="receiveMessages",
    summary="Receive messages for a group of competing workers (POP): ack each one",
    description=(
        "Asks the broker groups hosting the topic at once, each for a share of "
        "`max_messages` (the shares add up to it); when none has anything and `wait_ms` is "
        "given, long-polls them one at a time, a turn of at most "
        f"{LONG_POLL_TURN_MS} ms each, until one has "
        "messages or `wait_ms` is over. Every message a group hands out is in the answer: a "
        "receive never leaves a message it did not answer invisible. Each message names its "
        "`broker_group`, and its `receipt_handle` is `<group>~<handle>`, so its ack or change "
        "of invisibility goes to the group that issued it. Otherwise as a broker's receive."
    ),
    response_model=ClusterReceiveResponse,
    openapi_extra={"requestBody": json_request_body(ReceiveIn)},
)
async def receive(group: str, topic: str, request: Request) -> Response:
    """Receive from every group hosting the topic at once, each for its share of
    ``max_messages`` (:mod:`app.proxy.fanout`); when none has anything, long-poll them one at a
    time (:func:`~app.proxy.fanout.long_poll_in_turn`): every message a group hands out is in
    the answer, none is left invisible for nobody."""
    body = checked_body(ReceiveIn, await read_body(request))
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
        groups = [answer.broker_group for answer in answers]
        polled = await long_poll_in_turn(
            groups, wait_ms, lambda name, wait: ask(name, budget, wait)
        )
        answers = [polled] if polled is not None else []
    return BytesResponse(merged_receive(group, topic, answers), media_type="application/json")


@functools.lru_cache(maxsize=4096)
def receive_path(group: str, topic: str) -> str:
    return broker_path("v1", "groups", group, "topics", topic, "receive")


ACK_DESCRIPTION: Final = (
    "Each handle goes to the broker group that issued it (`<group>~<handle>`), every group's "
    "handles in one batch, all groups at once; the answer has one outcome per handle, in "
    "order: the broker's `acked`, `expired` or `invalid` (also a handle this proxy did not "
    "issue), or `failed` when its group did not take the ack — its master does not answer, "
    "the group has no master, or the broker refused — with the problem `code` and `detail`. "
    "**200**: every group answered. **207**: some handles `failed` while others were answered "
    "(those took effect); send the `failed` ones again after `Retry-After` (acking a handle "
    "twice is harmless). When no group took any handle, the "
    "answer is that group's problem, as for one group (`503 BROKER_UNAVAILABLE` with "
    "`Retry-After`): nothing took effect."
)
PARTLY_FAILED: Final = 207
"""An ack some of whose groups did not take their handles (Multi-Status: look at each)."""


@router.post(
    "/v1/groups/{group}/acks",
    operation_id="ackMessages",
    summary="Ack received messages by receipt handle (a batch; an outcome per handle)",
    description=ACK_DESCRIPTION,
    response_model=ClusterAckResponse,
    responses={
        PARTLY_FAILED: {
            "model": ClusterAckResponse,
            "description": "Partly taken: some handles `failed` (their group did not take "
            "them), the others were answered by their groups and took effect.",
            "headers": {
                "Retry-After": {
                    "description": "Seconds to wait before sending the failed handles again.",
                    "schema": {"type": "integer"},
                }
            },
        }
    },
)
async def ack(group: str, ack_in: ClusterAckIn, request: Request) -> Response:
    """Send each group's handles back to it, all groups at once; one outcome per handle, in
    order — a group that did not take its handles makes them ``failed`` (207), unless no group
    took any (then its refusal or error is the answer)."""
    handles = ack_in.receipt_handles
    view = cluster_view(request)
    outcomes, per_group = handles_by_group(handles, view.groups)

    async def ack_at(name: str) -> BrokerAnswer:
        return await forwarder(request).call(
            master_of(view, name),
            "POST",
            broker_path("v1", "groups", group, "acks"),
            json={"receipt_handles": [inner for _, inner in per_group[name]]},
            request=request,
        )

    failures: list[BrokerAnswer | Unreachable] = []
    for name, answer in await each_group(list(per_group), ack_at):
        if isinstance(answer, BrokerAnswer) and answer.ok:
            results = answer.json()["results"]
            for (index, _), result in zip(per_group[name], results, strict=True):
                outcomes[index] = {"code": None, **result, "receipt_handle": handles[index]}
        else:
            failures.append(answer)
            for index, _ in per_group[name]:
                outcomes[index] = failed_outcome(handles[index], answer)
    if failures and len(failures) == len(per_group):  # no group took any: nothing took effect
        first = failures[0]
        if isinstance(first, BrokerAnswer):
            return first.response()
        raise first
    answer_body = {"group": group, "results": [outcomes[i] for i in range(len(handles))]}
    if failures:
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        return OrjsonResponse(answer_body, status_code=PARTLY_FAILED, headers=retry)
    return OrjsonResponse(answer_body)


def handles_by_group(
    handles: list[str], groups: Container[str]
) -> tuple[dict[int, dict[str, Any]], dict[str, list[tuple[int, str]]]]:
    """The outcome of each handle this proxy did not issue (``invalid``), by its index; the
    others by the group that issued them: (index, the broker's handle), in order."""
    outcomes: dict[int, dict[str, Any]] = {}
    per_group: dict[str, list[tuple[int, str]]] = {}
    for index, handle in enumerate(handles):
        split = split_handle(handle)
        if split is None or split[0] not in groups:
            outcomes[index] = {
                "receipt_handle": handle,
                "outcome": "invalid",
                "detail": "not a receipt handle this proxy issued",
                "code": None,
            }
        else:
            per_group.setdefault(split[0], []).append((index, split[1]))
    return outcomes, per_group


def failed_outcome(handle: str, failure: BrokerAnswer | Unreachable) -> dict[str, Any]:
    """The outcome of ``handle`` whose group did not take it: the problem's code and detail."""
    if isinstance(failure, BrokerAnswer):
        code = failure.problem_code() or "BROKER_UNAVAILABLE"
        detail = f"its broker group refused the ack: {failure.status} {code}"
    else:
        code, detail = failure.code, str(failure)
    return {"receipt_handle": handle, "outcome": "failed", "detail": detail, "code": code}


@router.post(
    "/v1/groups/{group}/invisibility",
    operation_id="changeInvisibility",
    summary="Extend (or end) one received message's invisibility; answers a new handle",
    description=(
        "Goes to the broker group that issued the handle (`<group>~<handle>`); the new handle "
        "names it too. A handle this proxy did not issue answers 400 `INVALID_RECEIPT_HANDLE`; "
        "otherwise the broker's answer (an expired handle 409 `RECEIPT_HANDLE_EXPIRED`), or "
        "`503 BROKER_UNAVAILABLE` when the group's master does not answer."
    ),
    response_model=ClusterInvisibilityOut,
    openapi_extra={"requestBody": json_request_body(ClusterInvisibilityIn)},
)
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

"""Proxy endpoints for transactional messages: a half send goes to the group of the queue it
is placed in, and everything about the transaction afterwards goes back to that group.

The proxy answers a transaction id prefixed with its broker group (as it does POP receipt
handles), so an end, a state read or a check answer through any proxy reaches the broker that
holds the half message, and after a failover that group's new master. A half send is tried
once: one that may have been written is not sent again (it would be a second transaction);
if it was stored, the broker's check-back asks the producer group about it.
Check polls ask every group: at once without waiting, then a long-poll of all at once; the
first answer with checks wins and the other polls are cancelled. A check a cancelled poll had
already leased is offered again when its lease ends (``lease_ms``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.proxy.context import cluster_view, forwarder, send_picker
from app.proxy.forward import (
    BrokerAnswer,
    BrokerNoAnswerError,
    ProxyError,
    broker_path,
    long_poll_timeout,
)
from app.proxy.schemas import (
    ClusterCheckPollOut,
    ClusterEndOut,
    ClusterTransactionListOut,
    ClusterTransactionOut,
    ProxyTransactionIdPath,
    forwarded_body,
)
from app.responses import OrjsonResponse
from app.routes.params import ProducerGroupPath, TopicPath
from app.schemas.transactions import (
    CheckPollIn,
    EndIn,
    ProducerGroup,
    TransactionSendIn,
)
from services.cluster import (
    ClusterLabels,
    ClusterView,
    NoMasterError,
    batch_queue_id,
    batch_sharding_key,
    master_of,
    prefix_handle,
    split_handle,
    topic_route,
)

router = APIRouter(tags=["transactions"])


@router.post(
    "/v1/topics/{topic}/transactions",
    operation_id="sendHalfMessage",
    summary="Send a half message to the master of the queue's group",
    description=(
        "RocketMQ's transactional send, through the proxy: the answered `transaction_id` "
        "names the broker group that holds the half message, so its end reaches that group "
        "through any proxy. Tried once: when the broker's answer is lost the send may or may "
        "not have been stored, 504 OUTCOME_UNKNOWN (if it was, its check-back asks the "
        "producer group)."
    ),
    status_code=201,
    response_model=ClusterTransactionOut,
)
async def send_half(topic: TopicPath, half: TransactionSendIn, request: Request) -> Response:
    """The half goes to the master of the group of the queue it is placed in, with that
    group's local queue id (the body checked here as the broker checks it: the proxy puts
    its own queue id in)."""
    body = half.model_dump(exclude_unset=True)
    message = body["message"]
    queue_id, sharding_key = batch_queue_id(message), batch_sharding_key(message)
    view = cluster_view(request)
    route = topic_route(view, topic)
    queue = send_picker(request).pick(view, route, queue_id, sharding_key)
    local = {**message, "queue_id": queue.local_queue_id}
    try:
        answer = await forwarder(request).call(
            master_of(view, queue.group),
            "POST",
            broker_path("v1", "topics", topic, "transactions"),
            json={**body, "message": local},
            request=request,
        )
    except BrokerNoAnswerError as exc:  # not 503 + Retry-After: a retry is a second half
        detail = f"the half send may or may not have been stored ({exc.detail}): if it was, "
        raise ProxyError(
            "OUTCOME_UNKNOWN", detail + "its check-back asks the producer group"
        ) from None
    return _in_cluster_terms(answer, view, queue.group)


@router.get(
    "/v1/transactions/{transaction_id}",
    operation_id="getTransaction",
    summary="A transaction's state, checks and half message, from the group holding it",
    response_model=ClusterTransactionOut,
)
async def get_transaction(transaction_id: ProxyTransactionIdPath, request: Request) -> Response:
    return await _to_holder(request, transaction_id, "GET", "")


def _end_route(action: str, operation_id: str, summary: str, status_code: int = 200) -> None:
    """``POST /v1/transactions/{transaction_id}/{action}``, at the group holding the half
    message."""

    async def end_transaction(transaction_id: ProxyTransactionIdPath, request: Request) -> Response:
        return await _to_holder(request, transaction_id, "POST", action)

    end_transaction.__name__ = f"{action}_transaction"
    router.post(
        f"/v1/transactions/{{transaction_id}}/{action}",
        operation_id=operation_id,
        summary=summary,
        status_code=status_code,
        response_model=ClusterEndOut if status_code == 200 else None,
        openapi_extra=forwarded_body(EndIn),
    )(end_transaction)


_end_route("commit", "commitTransaction", "Commit: the message becomes visible, exactly once")
_end_route("rollback", "rollbackTransaction", "Roll back: the message is never delivered")
_end_route("unknown", "answerTransactionUnknown", "Answer a check with UNKNOWN", 204)


@router.get(
    "/v1/transactions",
    operation_id="listTransactions",
    summary="Every broker group's transactions waiting for an end, oldest first",
    response_model=ClusterTransactionListOut,
)
async def list_transactions(
    request: Request,
    producer_group: Annotated[ProducerGroup | None, Query(description="Only this group's.")] = None,
) -> Response:
    """Every group's list, merged (``producer_group``, checked here, goes to each with the
    query string as it came)."""
    view = cluster_view(request)
    groups = sorted(view.groups)
    answers = await asyncio.gather(
        *(
            forwarder(request).call(
                master_of(view, name),
                "GET",
                broker_path("v1", "transactions"),
                query=request.scope.get("query_string", b""),
                request=request,
            )
            for name in groups
        )
    )
    found: list[dict[str, Any]] = []
    for name, answer in zip(groups, answers, strict=True):
        if not answer.ok:
            return answer.response()
        for item in answer.json()["transactions"]:
            found.append(_labelled(item, view, name))
    found.sort(key=lambda t: t["half"]["store_timestamp"])
    return OrjsonResponse({"transactions": found})


@router.post(
    "/v1/producer-groups/{group}/transaction-checks",
    operation_id="pollTransactionChecks",
    summary="Long-poll the checks of a producer group from every broker group",
    description=(
        "Every group is asked at once without waiting, then, when none has a check and the "
        "poll waits, all long-poll at once and the first answer with checks wins. A check "
        "a cancelled poll had leased is offered again when its lease ends (`lease_ms`)."
    ),
    response_model=ClusterCheckPollOut,
)
async def poll_checks(group: ProducerGroupPath, poll: CheckPollIn, request: Request) -> Response:
    """The body checked here as the broker checks it: the proxy asks with its own waits."""
    body = poll.model_dump(exclude_unset=True)
    wait_ms = poll.wait_ms
    view = cluster_view(request)
    names = sorted(view.groups)

    async def ask(name: str, wait: Any) -> BrokerAnswer | None:
        try:
            return await forwarder(request).call(
                master_of(view, name),
                "POST",
                broker_path("v1", "producer-groups", group, "transaction-checks"),
                json={**body, "wait_ms": wait},
                request=request,
                timeout_s=long_poll_timeout(wait),
            )
        except (ProxyError, NoMasterError):
            return None  # a group without a reachable master has nothing to ask now

    answers = await asyncio.gather(*(ask(name, 0) for name in names))
    refused = next((a for a in answers if a is not None and not a.ok), None)
    if refused is not None:  # the broker says what is wrong with the request
        return refused.response()
    checks = _checks(view, zip(names, answers, strict=True))
    if not checks and wait_ms > 0:
        checks = await _first_with_checks(view, names, lambda name: ask(name, wait_ms))
    return OrjsonResponse({"producer_group": group, "checks": checks})


def _checks(
    view: ClusterView, answers: Iterable[tuple[str, BrokerAnswer | None]]
) -> list[dict[str, Any]]:
    return [
        _labelled(check, view, name)
        for name, answer in answers
        if answer is not None and answer.ok
        for check in answer.json()["checks"]
    ]


async def _first_with_checks(
    view: ClusterView, names: list[str], ask: Callable[[str], Awaitable[BrokerAnswer | None]]
) -> list[dict[str, Any]]:
    """Long-poll every group at once; the first answer with checks wins, the rest go."""

    async def one(name: str) -> list[dict[str, Any]]:
        return _checks(view, [(name, await ask(name))])

    tasks = [asyncio.create_task(one(name)) for name in names]
    try:
        for finished in asyncio.as_completed(tasks):
            checks = await finished
            if checks:
                return checks
        return []
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _to_holder(request: Request, transaction_id: str, method: str, action: str) -> Response:
    split = split_handle(transaction_id)
    view = cluster_view(request)
    if split is None or split[0] not in view.groups:
        raise ProxyError(
            "TRANSACTION_NOT_FOUND", "not a transaction id this proxy answered (group:id)"
        )
    name, inner = split
    segments = ("v1", "transactions", inner, action) if action else ("v1", "transactions", inner)
    answer = await forwarder(request).call(
        master_of(view, name),
        method,
        broker_path(*segments),
        content=await request.body() if method == "POST" else None,
        request=request,
    )
    return _in_cluster_terms(answer, view, name)


def _in_cluster_terms(answer: BrokerAnswer, view: ClusterView, group: str) -> Response:
    if not answer.ok or not answer.content:
        return answer.response()
    return answer.with_body(_labelled(answer.json(), view, group))


def _labelled(item: dict[str, Any], view: ClusterView, group: str) -> dict[str, Any]:
    """A broker's transaction, end or check with the proxy's transaction id, cluster-wide
    queue ids and its ``broker_group``."""
    item["transaction_id"] = prefix_handle(group, item["transaction_id"])
    item["broker_group"] = group
    for holder in (item, item.get("message")):
        if isinstance(holder, dict):
            route = view.topics.get(holder.get("topic", ""))
            if route is not None:
                ClusterLabels.of(route, group).apply([holder], tag=False)
    return item

"""Proxy endpoints for consumer groups: their configs, group pulls merged across broker
groups, and offset commits split per group."""

from __future__ import annotations

import functools
import logging
from typing import Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.errors import ApiError
from app.proxy.bodies import json_body
from app.proxy.context import (
    DEFAULT_MAX_MESSAGES,
    budget_shares,
    cluster_view,
    forwarder,
    int_param,
    query_items,
)
from app.proxy.fanout import GroupAnswer, first_non_empty, share_out
from app.proxy.forward import BrokerAnswer, broker_path, long_poll_timeout
from app.proxy.merge import merged_pull
from app.proxy.schemas import (
    ClusterGroupPullResponse,
    ClusterOffsetBatchIn,
    ClusterOffsetCommitResponse,
    ClusterQueueIdPath,
    forwarded_body,
    forwarded_query,
)
from app.responses import BytesResponse, OrjsonResponse
from app.routes.params import GroupPath, TopicPath
from app.schemas import GroupIn, GroupOut, OffsetCommitIn, OffsetCommitResponse
from app.schemas.messages import GroupPullQuery
from app.settings import MAX_PULL_MESSAGES, MAX_WAIT_MS
from services.cluster import (
    ClusterLabels,
    NoMasterError,
    TopicRoute,
    groups_with_master,
    master_of,
    queue_route,
    readers,
    split_commits,
    topic_route,
)

log = logging.getLogger(__name__)

router = APIRouter(tags=["groups"])


# ================================================================ consumer groups


_GROUP_CONFIG: Final = (
    "Every broker group with a master gets it (each keeps the group's own offsets)."
)


@router.put(
    "/v1/groups/{group}",
    operation_id="putGroup",
    summary="Create or replace a consumer group config in every broker group",
    description=_GROUP_CONFIG,
    response_model=GroupOut,
    responses={201: {"model": GroupOut, "description": "Created"}},
    openapi_extra=forwarded_body(GroupIn),
)
async def put_group(group: GroupPath, request: Request) -> Response:
    return await group_config(group, request)


@router.delete(
    "/v1/groups/{group}",
    operation_id="deleteGroup",
    summary="Delete a consumer group config and its offsets in every broker group",
    description=_GROUP_CONFIG,
    status_code=204,
    response_class=Response,
)
async def delete_group(group: GroupPath, request: Request) -> Response:
    return await group_config(group, request)


async def group_config(group: str, request: Request) -> Response:
    """A consumer group's config goes to every master (each group keeps its own offsets)."""
    view = cluster_view(request)
    content = await request.body()
    first: BrokerAnswer | None = None
    for name in groups_with_master(view):
        answer = await forwarder(request).call(
            master_of(view, name),
            request.method,
            broker_path("v1", "groups", group),
            content=content,
            request=request,
        )
        if not answer.ok:
            return answer.response()
        first = first or answer
    if first is None:
        raise NoMasterError("no broker group has a master right now")
    return first.response()


@router.get(
    "/v1/groups/{group}/topics/{topic}/messages",
    operation_id="pullGroupMessages",
    summary="Pull for a group from every broker group hosting the topic",
    description=(
        "Each hosting group pulls for its share of `max_messages`; when none has anything and "
        "the pull long-polls, all long-poll at once and the first with messages answers. "
        "Messages and queue positions carry cluster-wide queue ids and their `broker_group`; "
        "commit `queues[].next_offset` to acknowledge."
    ),
    response_model=ClusterGroupPullResponse,
    openapi_extra={"parameters": forwarded_query(GroupPullQuery)},
)
async def pull_group(group: GroupPath, topic: TopicPath, request: Request) -> Response:
    """Pull from every group hosting the topic at once, each for its share of
    ``max_messages`` (:mod:`app.proxy.fanout`); when none has anything and the pull
    long-polls, all long-poll at once and the first answer with messages is taken."""
    view = cluster_view(request)
    route = topic_route(view, topic)
    budget, wait_ms, auto_commit, as_given = pull_query(request)

    async def ask(name: str, max_messages: int, wait: int, commit: bool = True) -> BrokerAnswer:
        members = [master_of(view, name)] if auto_commit else readers(view, name)
        query, params = share_query(request, as_given, budget, wait_ms, max_messages, wait, commit)
        _, answer = await forwarder(request).call_any(
            members,
            "GET",
            group_pull_path(group, topic),
            query=query,
            params=params,
            request=request,
            labels=ClusterLabels.of(route, name),
            timeout_s=long_poll_timeout(wait),
        )
        return answer

    if not (1 <= budget <= MAX_PULL_MESSAGES and 0 <= wait_ms <= MAX_WAIT_MS):
        # out of the pull's bounds: the broker says what is wrong with it (shares of the
        # budget, or waits of the proxy's own, could be within them)
        return (await ask(route.groups()[0], budget, wait_ms)).response()

    found = await share_out(budget_shares(request), "pull", group, route, budget, ask)
    if found.refused is not None:
        return found.refused.response()
    answers = found.answers
    if not found.found() and wait_ms > 0:
        # The race's losers must not commit what they found: every group long-polls without
        # auto-commit, and only the winner's delivered messages are committed afterwards.
        polled = await first_non_empty(
            [a.broker_group for a in answers], lambda name: ask(name, budget, wait_ms, False)
        )
        if polled is not None:
            if auto_commit:
                await _commit_delivered(request, group, route, polled)
            answers = [polled]
    return BytesResponse(merged_pull(group, topic, answers), media_type="application/json")


def share_query(
    request: Request,
    as_given: bool,
    budget: int,
    wait_ms: int,
    max_messages: int,
    wait: int,
    commit: bool,
) -> tuple[bytes, list[tuple[str, str]] | None]:
    """The query of a broker group's share of a group pull: the client's as it came when it
    asks the same (:func:`_asks_as_given`), else one to encode (:func:`_asked`)."""
    if commit and as_given and max_messages == budget and wait == wait_ms:
        return request.scope["query_string"], None
    return b"", _asked(request, max_messages, wait, commit)


BROKER_MAX_MESSAGES: int = GroupPullQuery.model_fields["max_messages"].default
BROKER_WAIT_MS: int = GroupPullQuery.model_fields["wait_ms"].default


_READ: Final = frozenset(("max_messages", "wait_ms", "auto_commit"))


def pull_query(request: Request) -> tuple[int, int, bool, bool]:
    """A group pull's ``max_messages``, ``wait_ms`` and ``auto_commit`` (each its first
    value, as :func:`int_param` and :func:`query_param` read them), and whether the client's
    query string may go to a broker group as it came (:func:`_asks_as_given`): one pass over
    the parameters instead of one per name."""
    given: dict[str, list[str]] = {}
    for name, value in query_items(request):
        if name in _READ:
            given.setdefault(name, []).append(value)
    budget = _number(request, given, "max_messages", DEFAULT_MAX_MESSAGES)
    wait_ms = _number(request, given, "wait_ms", 0)
    auto_commit = given.get("auto_commit", [""])[0].lower() in ("true", "1", "yes")
    return budget, wait_ms, auto_commit, _asks_as_given(given, budget, wait_ms)


def _number(request: Request, given: dict[str, list[str]], name: str, default: int) -> int:
    values = given.get(name)
    if values is None:
        return default
    try:
        return int(values[0])
    except ValueError:
        return int_param(request, name, default)  # raises the proxy's own answer to it


def _asks_as_given(given: dict[str, list[str]], budget: int, wait_ms: int) -> bool:
    """Whether the client's query string, passed on as it came, asks a broker group for
    ``budget`` messages and ``wait_ms`` exactly as the query :func:`_asked` builds would:
    each of the two named at most once (a broker reads the last of several, the proxy the
    first), by the number itself (``032`` or ``+32`` are rebuilt, so the broker reads what the
    proxy read), or not at all when the broker's default is that number. The other parameters
    a broker reads the same either way (it parses the query string as the proxy does), so
    the common pull costs no encoding."""
    return _given_as(given.get("max_messages"), budget, BROKER_MAX_MESSAGES) and _given_as(
        given.get("wait_ms"), wait_ms, BROKER_WAIT_MS
    )


def _given_as(values: list[str] | None, value: int, default: int) -> bool:
    if values is None:
        return value == default
    return len(values) == 1 and values[0] == str(value)


def _asked(request: Request, max_messages: int, wait: int, commit: bool) -> list[tuple[str, str]]:
    """The query of a broker group's share: the client's parameters with its own share and
    wait, and without ``auto_commit`` when what it finds must not be committed (``commit``)."""
    query = [
        *((k, v) for k, v in query_items(request) if k not in ("max_messages", "wait_ms")),
        ("max_messages", str(max_messages)),
        ("wait_ms", str(wait)),
    ]
    if not commit:
        query = [(k, v) for k, v in query if k != "auto_commit"]
    return query


@functools.lru_cache(maxsize=4096)
def group_pull_path(group: str, topic: str) -> str:
    return broker_path("v1", "groups", group, "topics", topic, "messages")


async def _commit_delivered(
    request: Request, group: str, route: TopicRoute, pulled: GroupAnswer
) -> None:
    """Commit the positions past what one broker group's pull returned, at its master."""
    delivered = [
        {
            "topic": q["topic"],
            "queue_id": q["queue_id"],
            "offset": q["next_offset"],
            "broker_group": pulled.broker_group,
        }
        for q in pulled.answer.json().get("queues", ())
        if q.get("next_offset", 0) > q.get("offset", 0)
    ]
    if not delivered:
        return
    view = cluster_view(request)
    local = split_commits(delivered, {route.topic: route}).get(pulled.broker_group, [])
    answer = await forwarder(request).call(
        master_of(view, pulled.broker_group),
        "POST",
        broker_path("v1", "groups", group, "offsets"),
        json={"offsets": local},
        request=request,
    )
    if not answer.ok:  # delivered but not committed: they come again (at least once)
        log.warning("group %s: committing pulled offsets answered %s", group, answer.status)


@router.put(
    "/v1/groups/{group}/topics/{topic}/queues/{queue_id}/offset",
    operation_id="commitOffset",
    summary="Commit one cluster-wide queue's offset (the next offset to consume)",
    response_model=OffsetCommitResponse,
    openapi_extra=forwarded_body(OffsetCommitIn),
)
async def commit_offset(
    group: GroupPath, topic: TopicPath, queue_id: ClusterQueueIdPath, request: Request
) -> Response:
    view = cluster_view(request)
    route = topic_route(view, topic)
    queue = queue_route(route, queue_id)
    answer = await forwarder(request).call(
        master_of(view, queue.group),
        "PUT",
        broker_path(
            "v1", "groups", group, "topics", topic, "queues", queue.local_queue_id, "offset"
        ),
        content=await request.body(),
        request=request,
        labels=ClusterLabels.of(route, queue.group),
    )
    return answer.response()


@router.post(
    "/v1/groups/{group}/offsets",
    operation_id="commitOffsets",
    summary="Commit several offsets, split into one batch per broker group",
    description="Each group's batch is checked whole before it is stored; a batch refused "
    "answers for all, and the batches of groups before it stay committed.",
    response_model=ClusterOffsetCommitResponse,
    openapi_extra=forwarded_body(ClusterOffsetBatchIn),
)
async def commit_offsets(group: GroupPath, request: Request) -> Response:
    """Split commits of cluster-wide queues into one batch per broker group."""
    body = json_body(await request.body())
    offsets = body.get("offsets")
    if (
        not isinstance(offsets, list)
        or not offsets
        or not all(isinstance(o, dict) for o in offsets)
    ):
        raise ApiError("VALIDATION_FAILED", "offsets is a non-empty list of objects")
    view = cluster_view(request)
    per_group = split_commits(offsets, view.topics)
    unknown = sorted(set(per_group) - set(view.groups))
    if unknown:
        raise ApiError(
            "QUEUE_NOT_FOUND",
            f"no broker group of cluster {view.cluster!r} is named {', '.join(map(repr, unknown))}",
        )
    for name, local in per_group.items():
        answer = await forwarder(request).call(
            master_of(view, name),
            "POST",
            broker_path("v1", "groups", group, "offsets"),
            json={"offsets": local},
            request=request,
        )
        if not answer.ok:
            return answer.response()
    return OrjsonResponse({"group": group, "offsets": offsets})

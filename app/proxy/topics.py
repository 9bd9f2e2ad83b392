"""Proxy endpoints for topics: create one spread over broker groups, read its route, its
queues and their offsets across groups, and the proxy's own health (the route table it
currently follows)."""

from __future__ import annotations

import bisect
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.errors import ApiError
from app.proxy.context import (
    cluster_view,
    forwarder,
    route_registry,
)
from app.proxy.fanout import each_group
from app.proxy.forward import BrokerAnswer, ProxyError, broker_path
from app.proxy.schemas import (
    ClusterQueueIdPath,
    ClusterTopicDetailOut,
    ClusterTopicIn,
    ClusterTopicRouteOut,
    ProxyHealthOut,
)
from app.responses import OrjsonResponse
from app.routes.params import (
    AfterNameQuery,
    PageLimitQuery,
    TopicPath,
    name_page_description,
    next_after,
)
from app.schemas import TopicListResponse
from app.schemas.common import MAX_QUEUES, TIMESTAMP_DESCRIPTION, TimestampMs
from app.schemas.redelivery import QueueSeekOut
from services.cluster import (
    BrokerMember,
    ClusterLabels,
    ClusterView,
    NoMasterError,
    TopicRoute,
    groups_with_master,
    master_of,
    queue_route,
    readers,
    spread_queues,
    topic_route,
)

router = APIRouter()


# ================================================================ topics and routes


@router.put(
    "/v1/topics/{topic}",
    tags=["topics"],
    operation_id="putTopic",
    summary="Create a topic over broker groups, or answer the route it has",
    description=(
        "The queues are spread evenly over the hosting groups, the topic is created on each "
        "group's master, and its route is stored in etcd. A topic keeps its route: asked "
        "again with the same queue count it answers it (200); other groups or another count "
        "is 409 ROUTE_CONFLICT (queues do not move between groups)."
    ),
    response_model=ClusterTopicRouteOut,
    responses={201: {"model": ClusterTopicRouteOut, "description": "Created"}},
)
async def put_topic(topic: TopicPath, body: ClusterTopicIn, request: Request) -> Response:
    """Spread the topic's queues over groups, create it on each master, then store the route."""
    view = cluster_view(request)
    named = body.groups
    groups = _hosting_groups(view, named)
    if not groups:
        raise NoMasterError("no broker group has a master to host the topic")
    count = body.write_queue_nums
    most = MAX_QUEUES * len(groups)
    if not 1 <= count <= most:
        raise ApiError("VALIDATION_FAILED", f"write_queue_nums is an integer from 1 to {most}")
    route = _kept_route(view.topics.get(topic), spread_queues(topic, count, groups), named)
    masters = {g: master_of(view, g) for g in route.groups()}
    config = body.model_dump(include={"perm", "order"}, exclude_unset=True)
    created = False
    for group, master in masters.items():
        local = len(route.queues_of(group))
        local_body = {**config, "write_queue_nums": local, "read_queue_nums": local}
        answer = await forwarder(request).call(
            master,
            "PUT",
            broker_path("v1", "topics", topic),
            json=local_body,
            request=request,
        )
        if not answer.ok:
            return answer.response()
        created = created or answer.status == 201
    await route_registry(request).put_topic_route(route)
    await route_registry(request).refresh()
    return OrjsonResponse(_route_out(route), status_code=201 if created else 200)


def _kept_route(existing: TopicRoute | None, wanted: TopicRoute, named: Any) -> TopicRoute:
    """A topic that has a route keeps it: messages stay in the queues that hold them.

    Asked for again with the same queue count it answers its route, unless other groups are
    named; without named groups, the groups with a master now may be fewer than its own.
    """
    if existing is None or existing == wanted:
        return wanted
    same_count = len(existing.queues) == len(wanted.queues)
    same_groups = set(wanted.groups()) == set(existing.groups())
    if same_count and (same_groups or named is None):
        return existing
    raise ApiError(
        "ROUTE_CONFLICT",
        f"topic {existing.topic!r} already has {len(existing.queues)} queues over "
        f"{', '.join(existing.groups())}; its queues do not move between broker groups",
    )


def _hosting_groups(view: ClusterView, given: list[str] | None) -> list[str]:
    """The groups a new topic goes to: those named (each known), else every group with a master."""
    if given is None:
        return groups_with_master(view)
    unknown = sorted(set(given) - set(view.groups))
    if unknown:
        if view.groups:
            known = f"its groups: {', '.join(sorted(view.groups))}"
        else:
            known = "no broker has joined it: is that the brokers' --cluster name?"
        raise ApiError(
            "VALIDATION_FAILED",
            f"no broker group is named {', '.join(unknown)} in cluster {view.cluster!r} ({known})",
        )
    return list(given)


@router.get(
    "/v1/topics/{topic}/route",
    tags=["topics"],
    operation_id="getTopicRoute",
    summary="The topic's cluster-wide queues and the broker group hosting each",
    response_model=ClusterTopicRouteOut,
)
async def get_route(topic: TopicPath, request: Request) -> Response:
    return OrjsonResponse(_route_out(topic_route(cluster_view(request), topic)))


def _route_out(route: TopicRoute) -> dict[str, Any]:
    return {
        "topic": route.topic,
        "queues": [
            {"queue_id": q.queue_id, "group": q.group, "local_queue_id": q.local_queue_id}
            for q in route.queues
        ],
    }


# ================================================================ queues and offsets across groups


@router.get(
    "/v1/topics",
    tags=["topics"],
    operation_id="listTopics",
    summary="A page of the topics that have a route, by name",
    description=name_page_description("topic")
    + " Queue counts are across the cluster; a topic's config is its hosting groups'.",
    response_model=TopicListResponse,
)
async def list_topics(
    request: Request, limit: PageLimitQuery = 100, after: AfterNameQuery = None
) -> Response:
    """A page of the topics that have a route, with their cluster-wide queue counts; paged
    as a broker's list is (``limit``, ``after``, ``total``, ``next_after``)."""
    view = cluster_view(request)
    names = sorted(view.topics)
    start = 0 if after is None else bisect.bisect_right(names, after)
    page = names[start : start + limit]

    async def ask(group: str) -> dict[str, dict[str, Any]] | BrokerAnswer:
        return await _topic_details(request, group, after, page[-1] if page else "")

    details: dict[str, dict[str, Any]] = {}
    for _, answer in await each_group(sorted(view.groups), ask):
        if isinstance(answer, ProxyError | NoMasterError):
            continue
        if isinstance(answer, BrokerAnswer):
            return answer.response()
        for name, detail in answer.items():
            details.setdefault(name, detail)
    topics = []
    for name in page:
        count = len(view.topics[name].queues)
        known = details.get(name, {"perm": 6, "readable": True, "writeable": True})
        topics.append(
            {**_TOPIC_DEFAULTS, **known, "topic": name}
            | {"read_queue_nums": count, "write_queue_nums": count}
        )
    return OrjsonResponse(
        {"topics": topics, "total": len(names), "next_after": next_after(page, limit)}
    )


async def _topic_details(
    request: Request, group: str, after: str | None, last: str
) -> dict[str, dict[str, Any]] | BrokerAnswer:
    """The group's topic configs named after ``after`` up to ``last``, read page by page;
    the failing answer when a page fails."""
    details: dict[str, dict[str, Any]] = {}
    cursor = after
    while last:
        query = urlencode({"limit": _PAGE_MAX, **({"after": cursor} if cursor else {})})
        answer = await _read(request, group, broker_path("v1", "topics"), query.encode())
        if not answer.ok:
            return answer
        body = answer.json()
        for topic in body.get("topics", ()):
            details[topic["topic"]] = topic
        cursor = body.get("next_after")
        if cursor is None or cursor >= last:
            break
    return details


_PAGE_MAX = 1000
_TOPIC_DEFAULTS: dict[str, Any] = {"order": False, "system": False}


@router.get(
    "/v1/topics/{topic}",
    tags=["topics"],
    operation_id="getTopic",
    summary="A topic with every queue's offsets, from each hosting broker group",
    response_model=ClusterTopicDetailOut,
)
async def get_topic(topic: TopicPath, request: Request) -> Response:
    """The topic with every queue's offsets, from each hosting group (a slave when its
    master does not answer); queue ids are cluster-wide and name their ``broker_group``."""
    view = cluster_view(request)
    route = topic_route(view, topic)

    async def ask(group: str) -> BrokerAnswer:
        return await _read(request, group, broker_path("v1", "topics", topic))

    answers = await each_group(route.groups(), ask)
    merged: dict[str, Any] = {}
    queues: list[dict[str, Any]] = []
    for group, answer in answers:
        if isinstance(answer, ProxyError | NoMasterError):
            raise answer  # a partial list would hide queues from the caller
        if not answer.ok:
            return answer.response()
        detail = answer.json()
        merged = merged or detail
        routed = [
            q for q in detail.get("queues", ()) if route.global_id(group, q["queue_id"]) is not None
        ]
        ClusterLabels.of(route, group).apply(routed, tag=True)
        queues += routed
    count = len(route.queues)
    queues.sort(key=lambda q: int(q["queue_id"]))
    merged.update(read_queue_nums=count, write_queue_nums=count, queues=queues)
    return OrjsonResponse(merged)


@router.get(
    "/v1/topics/{topic}/queues/{queue_id}/offset",
    tags=["topics"],
    operation_id="getOffsetByTime",
    summary="The offset of a cluster-wide queue for a time (RocketMQ's searchOffset)",
    response_model=QueueSeekOut,
)
async def offset_by_time(
    topic: TopicPath,
    queue_id: ClusterQueueIdPath,
    request: Request,
    timestamp: Annotated[TimestampMs, Query(description=TIMESTAMP_DESCRIPTION)],
    boundary: Annotated[
        Literal["closest", "lower"],
        Query(description="`closest` (RocketMQ's searchOffset) or `lower` (first at or after)."),
    ] = "closest",
) -> Response:
    """The queue's offset for a store time, from its group (``timestamp`` and ``boundary``,
    checked here, go to it with the query string as it came)."""
    view = cluster_view(request)
    queue = queue_route(topic_route(view, topic), queue_id)
    path = broker_path("v1", "topics", topic, "queues", queue.local_queue_id, "offset")
    answer = await _read(request, queue.group, path)
    if not answer.ok:
        return answer.response()
    out = answer.json()
    out["queue_id"] = queue_id
    return answer.with_body(out)


async def _read(
    request: Request, group: str, path: str, query: bytes | None = None
) -> BrokerAnswer:
    """A GET to the group's master, or to a slave when the master does not answer; with the
    client's query string unless given another."""
    _, answer = await forwarder(request).call_any(
        readers(cluster_view(request), group),
        "GET",
        path,
        query=request.scope["query_string"] if query is None else query,
        request=request,
    )
    return answer


# ================================================================ the proxy itself


@router.get(
    "/healthz",
    tags=["health"],
    operation_id="healthz",
    summary="Liveness, and the route table the proxy follows",
    response_model=ProxyHealthOut,
)
async def healthz(request: Request) -> Response:
    view = cluster_view(request)
    masters: dict[str, BrokerMember | None] = {g: r.master for g, r in view.groups.items()}
    return OrjsonResponse(
        {
            "status": "ok",
            "cluster": view.cluster,
            "revision": view.revision,
            "masters": {g: m.name if m else None for g, m in masters.items()},
            "slaves": {g: [m.name for m in r.slaves] for g, r in view.groups.items()},
            "topics": sorted(view.topics),
        }
    )

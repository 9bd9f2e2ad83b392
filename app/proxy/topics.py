"""Proxy endpoints for topics: create one spread over broker groups, read its route, and the
proxy's own health (the route table it currently follows)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.errors import ApiError
from app.proxy.bodies import json_body
from app.proxy.context import (
    cluster_view,
    forwarder,
    route_registry,
)
from app.proxy.forward import broker_path
from app.responses import OrjsonResponse
from app.schemas.common import MAX_QUEUES
from services.cluster import (
    BrokerMember,
    ClusterView,
    NoMasterError,
    TopicRoute,
    groups_with_master,
    master_of,
    spread_queues,
    topic_route,
)

router = APIRouter()


# ================================================================ topics and routes


@router.put("/v1/topics/{topic}")
async def put_topic(topic: str, request: Request) -> Response:
    """Spread the topic's queues over groups, create it on each master, then store the route."""
    body = json_body(await request.body())
    view = cluster_view(request)
    named = body.pop("groups", None)
    groups = _hosting_groups(view, named)
    if not groups:
        raise NoMasterError("no broker group has a master to host the topic")
    count = body.get("write_queue_nums", 8)
    most = MAX_QUEUES * len(groups)
    if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= most:
        raise ApiError("VALIDATION_FAILED", f"write_queue_nums is an integer from 1 to {most}")
    route = _kept_route(view.topics.get(topic), spread_queues(topic, count, groups), named)
    masters = {g: master_of(view, g) for g in route.groups()}
    created = False
    for group, master in masters.items():
        local = len(route.queues_of(group))
        local_body = {**body, "write_queue_nums": local, "read_queue_nums": local}
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


def _hosting_groups(view: ClusterView, given: Any) -> list[str]:
    """The groups a new topic goes to: those named (each known), else every group with a master."""
    if given is None:
        return groups_with_master(view)
    if not isinstance(given, list) or not given or not all(isinstance(g, str) for g in given):
        raise ApiError("VALIDATION_FAILED", "groups is a non-empty list of broker group names")
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


@router.get("/v1/topics/{topic}/route")
async def get_route(topic: str, request: Request) -> Response:
    return OrjsonResponse(_route_out(topic_route(cluster_view(request), topic)))


def _route_out(route: TopicRoute) -> dict[str, Any]:
    return {
        "topic": route.topic,
        "queues": [
            {"queue_id": q.queue_id, "group": q.group, "local_queue_id": q.local_queue_id}
            for q in route.queues
        ],
    }


# ================================================================ the proxy itself


@router.get("/healthz")
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

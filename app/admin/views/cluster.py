"""Cluster: this broker's role and epoch, every group's master, slaves and in-sync set, and
where each topic's queues live (from the cluster's route table; a group of one outside it)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.problems import AdminRoute
from app.admin.rendering import render
from app.deps import BrokerDep
from services.cluster import ClusterMember, GroupRoute

router = APIRouter(route_class=AdminRoute)


@router.get("/cluster", name="admin-cluster")
async def cluster_page(request: Request, broker: BrokerDep) -> Response:
    member: ClusterMember | None = request.app.state.cluster
    view = member.registry.view if member is not None else None
    topics = []
    if view is not None:
        for route in sorted(view.topics.values(), key=lambda r: r.topic):
            spread = [(g, len(route.queues_of(g))) for g in route.groups()]
            topics.append({"topic": route.topic, "queues": len(route.queues), "spread": spread})
    groups = sorted(view.groups.values(), key=lambda g: g.group) if view else []
    context = {
        "title": "Cluster",
        "nav": "cluster",
        "status": broker.replica.status(),
        "cluster": view.cluster if view is not None else None,
        "group": member.group if member is not None else None,
        "groups": groups,
        "lag_bytes": {g.group: _lag_bytes(g) for g in groups},
        "topics": topics,
    }
    return render(request, "cluster.html", context)


def _lag_bytes(group: GroupRoute) -> dict[str, int]:
    """Each slave's distance behind its master, from the offsets both published in etcd."""
    if group.master is None:
        return {}
    head = group.master.confirmed_offset
    return {s.name: max(0, head - s.confirmed_offset) for s in group.slaves}

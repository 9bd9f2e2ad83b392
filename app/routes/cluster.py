"""Cluster: where a topic's queues live and who masters each group hosting them."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.deps import BrokerDep, ClusterDep
from app.routes.params import TopicPath
from app.schemas.cluster import TopicRouteOut, topic_route_out
from services.cluster import cluster_route, local_route

router = APIRouter(tags=["cluster"])


@router.get(
    "/v1/topics/{topic}/route",
    operation_id="getTopicRoute",
    summary="The topic's queues, the group hosting each, and each group's master and slaves",
    description=(
        "In cluster mode the answer comes from the cluster's route table (a topic created on "
        "a master gets a route over that master's group); outside a cluster the local broker "
        "is a group of one. 404 when the topic has no route."
    ),
    response_model=TopicRouteOut,
)
async def topic_route(
    topic: TopicPath, broker: BrokerDep, member: ClusterDep, request: Request
) -> TopicRouteOut:
    if member is None:
        return topic_route_out(local_route(broker, topic, str(request.base_url).rstrip("/")))
    broker.replica.status()  # 503 until the store is open
    return topic_route_out(await cluster_route(member, topic))

"""Bodies of the cluster routes: a topic's route (its queues and the groups hosting them)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.schemas.common import ResponseBody
from services.cluster import BrokerMember, GroupRoute, RouteAnswer


class ReplicaOut(ResponseBody):
    name: str = Field(description="The replica's broker name.")
    http_url: str = Field(description="Its HTTP base URL.")
    ha_address: str = Field(description="The HA HOST:PORT it streams on as master.")
    role: Literal["master", "slave"]
    epoch: int = Field(description="The newest epoch it knows.")
    confirmed_offset: int = Field(description="CommitLog offset it holds on disk.")


class GroupRouteOut(ResponseBody):
    group: str = Field(description="The broker group (a master and its slaves).")
    epoch: int = Field(description="The group's current epoch.")
    master: ReplicaOut | None = Field(description="The master; null during a failover.")
    slaves: list[ReplicaOut]
    in_sync: list[str] = Field(description="Slaves the master counts as in sync.")


class QueueRouteOut(ResponseBody):
    queue_id: int = Field(description="The queue's id across the cluster.")
    group: str = Field(description="The group hosting it.")
    local_queue_id: int = Field(description="Its queue id inside that group's store.")


class TopicRouteOut(ResponseBody):
    topic: str
    cluster: str | None = Field(description="The cluster's name; null outside cluster mode.")
    queues: list[QueueRouteOut]
    groups: list[GroupRouteOut]


def _replica(member: BrokerMember) -> ReplicaOut:
    role: Literal["master", "slave"] = "master" if member.role == "master" else "slave"
    return ReplicaOut(
        name=member.name,
        http_url=member.http_url,
        ha_address=member.ha_address,
        role=role,
        epoch=member.epoch,
        confirmed_offset=member.confirmed_offset,
    )


def _group(group: GroupRoute) -> GroupRouteOut:
    return GroupRouteOut(
        group=group.group,
        epoch=group.epoch,
        master=_replica(group.master) if group.master else None,
        slaves=[_replica(s) for s in group.slaves],
        in_sync=list(group.sync_state_set),
    )


def topic_route_out(answer: RouteAnswer) -> TopicRouteOut:
    return TopicRouteOut(
        topic=answer.route.topic,
        cluster=answer.cluster,
        queues=[
            QueueRouteOut(queue_id=q.queue_id, group=q.group, local_queue_id=q.local_queue_id)
            for q in answer.route.queues
        ],
        groups=[_group(g) for g in answer.groups],
    )

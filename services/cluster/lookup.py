"""Answer a topic's route: from the cluster's route table, or (outside a cluster) the local
broker as a group of one — so clients read routes the same way in both modes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.cluster.route_table import BrokerMember, GroupRoute, TopicRoute, spread_queues
from services.errors import EtcdUnavailableError, TopicNotFoundError

if TYPE_CHECKING:
    from services.broker import Broker
    from services.cluster.member import ClusterMember


@dataclass(frozen=True, slots=True)
class RouteAnswer:
    """A topic's queues and the groups that host them."""

    cluster: str | None
    route: TopicRoute
    groups: tuple[GroupRoute, ...]


def local_route(broker: Broker, topic: str, http_url: str) -> RouteAnswer:
    """Outside a cluster: every queue of the local topic in this broker's own group."""
    config = broker.topics.get(topic)  # TopicNotFoundError when absent
    name = broker.config.broker_name
    status = broker.replica.status()
    me = BrokerMember(
        name,
        name,
        http_url,
        status.ha_address or "",
        status.role,
        status.epoch,
        status.confirmed_offset,
    )
    if status.role == "master":
        group = GroupRoute(name, status.epoch, me, (), tuple(sorted(status.sync_state_set)))
    else:
        group = GroupRoute(name, status.epoch, None, (me,), ())
    return RouteAnswer(
        None, spread_queues(config.topic_name, config.read_queue_nums, [name]), (group,)
    )


async def cluster_route(member: ClusterMember, topic: str) -> RouteAnswer:
    """The topic's route from the registry; a local topic without one is registered first
    (by a master, for its own group)."""
    view = member.registry.view
    if topic not in view.topics:
        try:
            view = await member.registry.refresh()
            if topic not in view.topics and member.broker.replica.accepts_writes:
                config = member.broker.topics.get(topic)
                await member.register_topic(config.topic_name, config.read_queue_nums)
                view = member.registry.view
        except EtcdUnavailableError:
            pass  # answer from the last view read
    route = view.topics.get(topic)
    if route is None:
        raise TopicNotFoundError(f"topic {topic!r} has no route in cluster {view.cluster}")
    groups = tuple(view.groups.get(g, GroupRoute(g)) for g in route.groups())
    return RouteAnswer(view.cluster, route, groups)

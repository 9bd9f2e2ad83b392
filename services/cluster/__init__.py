"""Several broker groups as one cluster: an etcd client, the route table kept in etcd, and
(built on them) election and failover of each group's master."""

from services.cluster.etcd import EtcdClient
from services.cluster.registry import RouteRegistry
from services.cluster.route_table import (
    BrokerMember,
    ClusterKeys,
    ClusterView,
    GroupRoute,
    QueueRoute,
    TopicRoute,
    spread_queues,
)
from services.errors import EtcdError, EtcdUnavailableError

__all__ = [
    "BrokerMember",
    "ClusterKeys",
    "ClusterView",
    "EtcdClient",
    "EtcdError",
    "EtcdUnavailableError",
    "GroupRoute",
    "QueueRoute",
    "RouteRegistry",
    "TopicRoute",
    "spread_queues",
]

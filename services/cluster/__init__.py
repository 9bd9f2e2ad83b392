"""Several broker groups as one cluster: an etcd client, the route table kept in etcd, and
(built on them) election and failover of each group's master, route lookups, and the
proxy's routing of requests to groups."""

from services.cluster.etcd import EtcdClient
from services.cluster.labels import ClusterLabels, prefix_handle, split_handle
from services.cluster.lookup import RouteAnswer, cluster_route, local_route
from services.cluster.member import ClusterConfig, ClusterMember
from services.cluster.proxy_routing import (
    NoMasterError,
    SendPicker,
    batch_queue_id,
    batch_sharding_key,
    groups_with_master,
    localize_send,
    master_of,
    queue_route,
    readers,
    split_commits,
    timer_group,
    topic_route,
)
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
    "ClusterConfig",
    "ClusterKeys",
    "ClusterLabels",
    "ClusterMember",
    "ClusterView",
    "EtcdClient",
    "EtcdError",
    "EtcdUnavailableError",
    "GroupRoute",
    "NoMasterError",
    "QueueRoute",
    "RouteAnswer",
    "RouteRegistry",
    "SendPicker",
    "TopicRoute",
    "batch_queue_id",
    "batch_sharding_key",
    "cluster_route",
    "groups_with_master",
    "local_route",
    "localize_send",
    "master_of",
    "prefix_handle",
    "queue_route",
    "readers",
    "split_commits",
    "split_handle",
    "spread_queues",
    "timer_group",
    "topic_route",
]

"""The cluster's route table: which broker group hosts which queues of a topic, and who is
each group's master — RocketMQ's TopicRouteData, kept in etcd instead of a NameServer.

A topic's queues have cluster-wide ids ``0..n-1``; each is hosted by one broker group under
a local queue id (the queue id inside that group's store). Queues are spread over groups in
contiguous blocks, so a group's local ids are ``0..k-1`` as a single broker would have them.

Key layout under ``/spoolmq/<cluster>/`` (values are JSON)::

    groups/<g>/master          the elected master; attached to the master's lease
    groups/<g>/epoch           {"epoch", "master", "start_offset"}: the group's epoch counter
    groups/<g>/brokers/<name>  each live replica (role, offsets); attached to its own lease
    groups/<g>/sync_state      {"epoch", "master", "members"}: in-sync replicas, by the master
    topics/<topic>             {"topic", "queues": [{"queue_id", "group", "local_queue_id"}]}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

ROOT = "/spoolmq"


@dataclass(frozen=True, slots=True)
class ClusterKeys:
    """Where each piece of the route table lives in etcd, for one cluster."""

    cluster: str

    @property
    def prefix(self) -> str:
        return f"{ROOT}/{self.cluster}/"

    @property
    def groups_prefix(self) -> str:
        return f"{self.prefix}groups/"

    @property
    def topics_prefix(self) -> str:
        return f"{self.prefix}topics/"

    def master(self, group: str) -> str:
        return f"{self.groups_prefix}{group}/master"

    def epoch(self, group: str) -> str:
        return f"{self.groups_prefix}{group}/epoch"

    def broker(self, group: str, name: str) -> str:
        return f"{self.groups_prefix}{group}/brokers/{name}"

    def brokers_prefix(self, group: str) -> str:
        return f"{self.groups_prefix}{group}/brokers/"

    def sync_state(self, group: str) -> str:
        return f"{self.groups_prefix}{group}/sync_state"

    def topic(self, topic: str) -> str:
        return f"{self.topics_prefix}{topic}"


@dataclass(frozen=True, slots=True)
class BrokerMember:
    """One replica of a broker group, as it announces itself."""

    name: str
    group: str
    http_url: str
    ha_address: str
    role: str = "slave"  # "master" | "slave"
    epoch: int = 0
    confirmed_offset: int = 0  # the CommitLog offset this replica holds durably

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes | str | dict[str, Any]) -> BrokerMember:
        data = raw if isinstance(raw, dict) else json.loads(raw)
        return cls(
            name=str(data["name"]),
            group=str(data["group"]),
            http_url=str(data["http_url"]),
            ha_address=str(data["ha_address"]),
            role=str(data.get("role", "slave")),
            epoch=int(data.get("epoch", 0)),
            confirmed_offset=int(data.get("confirmed_offset", 0)),
        )


@dataclass(frozen=True, slots=True)
class GroupRoute:
    """A broker group: its current master (None during a failover), slaves and in-sync set."""

    group: str
    epoch: int = 0
    master: BrokerMember | None = None
    slaves: tuple[BrokerMember, ...] = ()
    sync_state_set: tuple[str, ...] = ()

    def replicas(self) -> tuple[BrokerMember, ...]:
        return ((self.master,) if self.master else ()) + self.slaves


@dataclass(frozen=True, slots=True)
class QueueRoute:
    """One queue of a topic: its cluster-wide id and where it lives."""

    queue_id: int
    group: str
    local_queue_id: int


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic's queues across broker groups.

    Immutable (a changed route is a new one), so what the proxy asks of it on every request —
    its groups, each group's renumbered queue ids — is worked out once, when it is made."""

    topic: str
    queues: tuple[QueueRoute, ...]
    _groups: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _renumbered: dict[str, dict[int, int]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_groups", tuple(sorted({q.group for q in self.queues})))
        local_to_cluster: dict[str, dict[int, int]] = {}
        for q in self.queues:
            local_to_cluster.setdefault(q.group, {}).setdefault(q.local_queue_id, q.queue_id)
        renumbered = {
            group: {local: cluster for local, cluster in ids.items() if local != cluster}
            for group, ids in local_to_cluster.items()
        }
        object.__setattr__(self, "_renumbered", renumbered)

    def queue(self, queue_id: int) -> QueueRoute | None:
        if 0 <= queue_id < len(self.queues) and self.queues[queue_id].queue_id == queue_id:
            return self.queues[queue_id]
        return next((q for q in self.queues if q.queue_id == queue_id), None)

    def groups(self) -> list[str]:
        return list(self._groups)

    def renumbered(self, group: str) -> dict[int, int]:
        """``group``'s local queue ids whose cluster-wide id differs, each mapped to that id
        (as :meth:`global_id` finds it). Shared: read only."""
        return self._renumbered.get(group, _NONE_RENUMBERED)

    def queues_of(self, group: str) -> list[QueueRoute]:
        return [q for q in self.queues if q.group == group]

    def global_id(self, group: str, local_queue_id: int) -> int | None:
        for q in self.queues:
            if q.group == group and q.local_queue_id == local_queue_id:
                return q.queue_id
        return None

    def to_json(self) -> bytes:
        body = {"topic": self.topic, "queues": [asdict(q) for q in self.queues]}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> TopicRoute:
        data = json.loads(raw)
        queues = tuple(
            QueueRoute(int(q["queue_id"]), str(q["group"]), int(q["local_queue_id"]))
            for q in data["queues"]
        )
        return cls(str(data["topic"]), tuple(sorted(queues, key=lambda q: q.queue_id)))


_NONE_RENUMBERED: dict[int, int] = {}


def spread_queues(topic: str, queue_count: int, groups: Sequence[str]) -> TopicRoute:
    """Spread ``queue_count`` queues over ``groups`` in contiguous, near-equal blocks."""
    if queue_count < 1:
        raise ValueError("a topic needs at least one queue")
    if not groups:
        raise ValueError("a topic needs at least one broker group")
    ordered = sorted(set(groups))
    share, extra = divmod(queue_count, len(ordered))
    queues: list[QueueRoute] = []
    for index, group in enumerate(ordered):
        count = share + (1 if index < extra else 0)
        for local in range(count):
            queues.append(QueueRoute(len(queues), group, local))
    return TopicRoute(topic, tuple(queues))


@dataclass(frozen=True, slots=True)
class ClusterView:
    """A consistent snapshot of one cluster's route table (one etcd range read)."""

    cluster: str
    revision: int = 0
    groups: dict[str, GroupRoute] = field(default_factory=dict)
    topics: dict[str, TopicRoute] = field(default_factory=dict)

    def master_of(self, group: str) -> BrokerMember | None:
        route = self.groups.get(group)
        return route.master if route else None

    @classmethod
    def from_kvs(cls, cluster: str, revision: int, kvs: Iterable[tuple[str, bytes]]) -> ClusterView:
        """Build the view from ``(key, value)`` pairs read under the cluster's prefix."""
        keys = ClusterKeys(cluster)
        masters: dict[str, BrokerMember] = {}
        epochs: dict[str, int] = {}
        members: dict[str, list[BrokerMember]] = {}
        sync_sets: dict[str, tuple[str, ...]] = {}
        topics: dict[str, TopicRoute] = {}
        for key, value in kvs:
            if key.startswith(keys.topics_prefix):
                route = TopicRoute.from_json(value)
                topics[route.topic] = route
                continue
            if not key.startswith(keys.groups_prefix):
                continue
            group, _, rest = key[len(keys.groups_prefix) :].partition("/")
            if rest == "master":
                masters[group] = BrokerMember.from_json(value)
            elif rest == "epoch":
                epochs[group] = int(json.loads(value)["epoch"])
            elif rest == "sync_state":
                sync_sets[group] = tuple(json.loads(value).get("members", ()))
            elif rest.startswith("brokers/"):
                members.setdefault(group, []).append(BrokerMember.from_json(value))
        groups: dict[str, GroupRoute] = {}
        for group in sorted(set(masters) | set(epochs) | set(members) | set(sync_sets)):
            master = masters.get(group)
            slaves = tuple(
                sorted(
                    (m for m in members.get(group, ()) if master is None or m.name != master.name),
                    key=lambda m: m.name,
                )
            )
            epoch = max(epochs.get(group, 0), master.epoch if master else 0)
            groups[group] = GroupRoute(group, epoch, master, slaves, sync_sets.get(group, ()))
        return cls(cluster, revision, groups, topics)

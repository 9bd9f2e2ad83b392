"""The proxy's routing decisions, free of I/O: which group and member serve a request, how
cluster-wide queue ids map to a group's local ids, and how per-group answers merge.

Like RocketMQ 5's proxy, these rules hold no state of their own: everything comes from the
:class:`ClusterView` read from etcd, so any number of proxies route the same way.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from services.cluster.route_table import BrokerMember, ClusterView, QueueRoute, TopicRoute
from services.errors import (
    BatchRejectedError,
    BrokerUnavailableError,
    InvalidTimerHandleError,
    NotFoundError,
    ServiceError,
)
from services.send import shard_queue
from services.timer.handles import decode_handle


class RouteNotFoundError(NotFoundError):
    """The route table has no route for the topic."""

    code: ClassVar[str] = "TOPIC_NOT_FOUND"


class QueueNotRoutedError(NotFoundError):
    """A cluster-wide queue id the topic's route does not have."""

    code: ClassVar[str] = "QUEUE_NOT_FOUND"


class NoMasterError(BrokerUnavailableError):
    """A group has no master (a failover is under way): writes there must wait."""

    code: ClassVar[str] = "BROKER_UNAVAILABLE"


class SendFieldError(ServiceError):
    """A send's ``queue_id`` or ``sharding_key`` has the wrong type or range."""

    code: ClassVar[str] = "VALIDATION_FAILED"


class SplitBatchError(BatchRejectedError):
    """A batch names more than one queue or sharding key: it cannot be stored atomically."""


def topic_route(view: ClusterView, topic: str) -> TopicRoute:
    route = view.topics.get(topic)
    if route is None:
        raise RouteNotFoundError(f"no route for topic {topic!r} in cluster {view.cluster!r}")
    return route


def queue_route(route: TopicRoute, queue_id: int) -> QueueRoute:
    queue = route.queue(queue_id)
    if queue is None:
        raise QueueNotRoutedError(
            f"topic {route.topic!r} has queues 0..{len(route.queues) - 1}, not {queue_id}"
        )
    return queue


def master_of(view: ClusterView, group: str) -> BrokerMember:
    master = view.master_of(group)
    if master is None:
        raise NoMasterError(f"broker group {group!r} has no master right now")
    return master


def readers(view: ClusterView, group: str) -> list[BrokerMember]:
    """Who may serve a read of ``group``: its master first, then its slaves."""
    route = view.groups.get(group)
    return list(route.replicas()) if route else []


def groups_with_master(view: ClusterView) -> list[str]:
    return [name for name, group in sorted(view.groups.items()) if group.master is not None]


class SendPicker:
    """Chooses the cluster-wide queue of a send: explicit id, sharding key, idempotency key, or
    round robin.

    A key (sharding or idempotency) hashes over *all* the topic's queues, as the broker's own
    ``shard_queue`` does over its local ones: the same key reaches the same queue through any
    proxy, whatever group is down, so a retry finds what its first attempt stored.
    """

    def __init__(self) -> None:
        self.counters: dict[str, Iterator[int]] = {}
        self._writable: dict[str, tuple[ClusterView, TopicRoute, list[QueueRoute]]] = {}

    def pick(
        self,
        view: ClusterView,
        route: TopicRoute,
        queue_id: int | None,
        sharding_key: str | None,
        avoid: Iterable[str] = (),
        idempotency_key: str | None = None,
    ) -> QueueRoute:
        """The queue to send to; ``avoid`` names groups that just failed (round robin only)."""
        if queue_id is not None:
            return queue_route(route, queue_id)
        placing_key = sharding_key if sharding_key is not None else idempotency_key
        if placing_key is not None:
            return route.queues[shard_queue(placing_key, len(route.queues))]
        skip = set(avoid)
        writable = self._writable_queues(view, route) if not skip else None
        if writable is None:
            writable = [
                q
                for q in route.queues
                if q.group not in skip and view.master_of(q.group) is not None
            ]
        if not writable:
            raise NoMasterError(f"no broker group of topic {route.topic!r} has a master right now")
        counter = self.counters.setdefault(route.topic, itertools.count())
        return writable[next(counter) % len(writable)]

    def _writable_queues(self, view: ClusterView, route: TopicRoute) -> list[QueueRoute]:
        """The topic's queues whose group has a master, kept until the view or the route
        changes (a new view is a new object: the registry never changes one in place)."""
        known = self._writable.get(route.topic)
        if known is not None and known[0] is view and known[1] is route:
            return known[2]
        writable = [q for q in route.queues if view.master_of(q.group) is not None]
        if len(self._writable) >= 4096 and route.topic not in self._writable:
            self._writable.clear()  # bounded: a proxy of many topics recomputes now and then
        self._writable[route.topic] = (view, route, writable)
        return writable


def batch_queue_id(body: Mapping[str, Any]) -> int | None:
    """The one explicit cluster-wide queue id of a JSON send (single or batch), if any."""
    ids = _named(body, "queue_id")
    if len(ids) > 1:
        raise SplitBatchError(
            "every message of a batch goes to one queue: give one queue_id or sharding_key"
        )
    found = ids.pop() if ids else None
    if found is None:
        return None
    if isinstance(found, float) and found.is_integer():
        found = int(found)  # a whole number written 4.0, as the broker reads it
    if not isinstance(found, int) or isinstance(found, bool) or found < 0:
        raise SendFieldError(f"queue_id is an integer of at least 0, not {found!r}")
    return found


def batch_sharding_key(body: Mapping[str, Any]) -> str | None:
    keys = _named(body, "sharding_key")
    if len(keys) > 1:
        raise SplitBatchError(
            "every message of a batch goes to one queue: give one queue_id or sharding_key"
        )
    found = keys.pop() if keys else None
    if found is not None and not isinstance(found, str):
        raise SendFieldError(f"sharding_key is a string, not {found!r}")
    return found


def _named(body: Mapping[str, Any], name: str) -> list[Any]:
    """The distinct values of ``name`` a send and its batch's messages give, up to the second:
    a list, not a set, for a client may give a list or an object there (unhashable: its answer
    is a 422)."""
    messages = body.get("messages")
    given = [body.get(name)]
    if isinstance(messages, list):  # anything else is the broker's to refuse
        given += [m.get(name) for m in messages if isinstance(m, dict)]
    found: list[Any] = []
    for value in given:
        if value is not None and value not in found:
            found.append(value)
            if len(found) > 1:
                break  # two are already too many: no need to compare the rest with both
    return found


def localize_send(body: dict[str, Any], local_queue_id: int) -> dict[str, Any]:
    """The JSON send for the chosen group: its local queue id, no sharding key left."""
    out = {k: v for k, v in body.items() if k != "sharding_key"}
    out["queue_id"] = local_queue_id
    messages = out.get("messages")
    if isinstance(messages, list) and any(_names_a_queue(m) for m in messages):
        out["messages"] = [
            {k: v for k, v in m.items() if k not in ("queue_id", "sharding_key")}
            if isinstance(m, dict)
            else m
            for m in messages
        ]
    return out


def _names_a_queue(message: object) -> bool:
    return isinstance(message, dict) and ("queue_id" in message or "sharding_key" in message)


def split_commits(
    offsets: Sequence[Mapping[str, Any]], topic_routes: Mapping[str, TopicRoute]
) -> dict[str, list[dict[str, Any]]]:
    """Split a batch of commits with cluster-wide ids into each group's local commits.

    A commit of a broker's own queue (its retry topic) names that group in ``broker_group``.
    """
    per_group: dict[str, list[dict[str, Any]]] = {}
    for entry in offsets:
        topic = str(entry.get("topic"))
        group = entry.get("broker_group")
        queue_id = entry.get("queue_id")
        local = dict(entry)
        local.pop("broker_group", None)
        topic_of = topic_routes.get(topic)
        if isinstance(group, str) and (topic_of is None or topic.startswith("%")):
            per_group.setdefault(group, []).append(local)
            continue
        if topic_of is None:
            raise RouteNotFoundError(f"no route for topic {topic!r}")
        if not isinstance(queue_id, int):
            raise QueueNotRoutedError("each offset names an integer queue_id")
        queue = queue_route(topic_of, queue_id)
        local["queue_id"] = queue.local_queue_id
        per_group.setdefault(queue.group, []).append(local)
    return per_group


def timer_group(view: ClusterView, topic: str, handle: str) -> str:
    """The group holding the timer message a cancel handle names: the group it names (or,
    when it names a broker, that broker's group), else the topic's only group;
    InvalidTimerHandleError when neither says (the handle is not one, or names another topic
    or a group or broker the cluster does not have)."""
    parsed = decode_handle(handle)
    if parsed.topic != topic:
        raise InvalidTimerHandleError(f"the handle is for topic {parsed.topic!r}, not {topic!r}")
    if parsed.names_group and parsed.issuer in view.groups:
        return parsed.issuer
    # A handle naming a broker: issued before handles named groups, or by a broker that was
    # not told its group (it names itself then).
    for name, group in sorted(view.groups.items()):
        if any(member.name == parsed.issuer for member in group.replicas()):
            return name
    groups = topic_route(view, topic).groups()
    if len(groups) == 1:
        return groups[0]
    kind = "group" if parsed.names_group else "broker"
    raise InvalidTimerHandleError(
        f"the handle names {kind} {parsed.issuer!r}, which the cluster does not have"
    )

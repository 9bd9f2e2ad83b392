"""A broker group's answers in the cluster's terms, as a proxy asks for them.

Behind a proxy a topic's queues have cluster-wide ids and live in several broker groups
(:mod:`services.cluster.route_table`). What a broker answers about its own queues — send
receipts, pulled and received messages, queue positions, lookups — speaks of its local
queue ids. A client of the proxy sees instead:

* the cluster-wide id of every queue of the topic it asked about (a queue of the group's
  retry topic, told by its ``topic`` or ``queue_topic``, is the group's own and keeps its id);
* ``broker_group``, the group that answered: on a send's answer, and on each message and
  queue of a group pull or a POP receive (a commit of a retry-topic queue names it);
* POP receipt handles that name their group: ``<group>~<handle>``
  (:func:`~services.cluster.proxy_routing.prefix_handle`).

The proxy names the labels in two request headers (:meth:`ClusterLabels.headers`) and the
broker puts them in as it renders its answer, so an answer passes through the proxy as it
came. Where the proxy reads an answer anyway (a lookup by id, whose topic it learns from the
answer), it applies the same :class:`ClusterLabels` itself: one rule, whoever applies it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from services.cluster.route_table import TopicRoute

BROKER_GROUP_HEADER: Final = b"spoolmq-broker-group"
"""The broker group a proxy addresses (it labels the answer)."""
QUEUE_IDS_HEADER: Final = b"spoolmq-queue-ids"
"""``local=cluster`` pairs, comma-separated, of the request's topic where the two differ."""
HANDLE_SEPARATOR: Final = "~"
"""Separates the broker group from the broker's own receipt handle in a proxied handle."""


@dataclass(frozen=True, slots=True)
class ClusterLabels:
    """How one broker group's answer about ``topic`` is put in the cluster's terms."""

    group: str
    topic: str
    queue_ids: Mapping[int, int]
    """The group's local queue ids of ``topic`` that differ from their cluster-wide ids."""
    _headers: list[tuple[bytes, bytes]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @classmethod
    def of(cls, route: TopicRoute, group: str) -> ClusterLabels:
        """``group``'s labels for ``route``'s topic: made once per route and group (a proxy
        asks for them on every request; a changed route is a new one)."""
        key = (route.topic, group)
        known = _LABELS.get(key)
        if known is not None and known[0] is route:
            return known[1]
        labels = cls(group, route.topic, route.renumbered(group))
        if len(_LABELS) >= _MAX_LABELS:
            _LABELS.clear()
        _LABELS[key] = (route, labels)
        return labels

    @classmethod
    def from_headers(
        cls, headers: Iterable[tuple[bytes, bytes]], topic: str
    ) -> ClusterLabels | None:
        """The labels a request asks for (None: it asks for none); ValueError when its
        queue ids are not ``local=cluster`` pairs of whole numbers."""
        group: bytes | None = None
        pairs = b""
        for name, value in headers:
            if name == BROKER_GROUP_HEADER:
                group = value
            elif name == QUEUE_IDS_HEADER:
                pairs = value
        if group is None:
            return None
        queue_ids: dict[int, int] = {}
        for pair in pairs.split(b","):
            if pair.strip():
                local, _, cluster = pair.partition(b"=")
                queue_ids[int(local)] = int(cluster)
        return cls(group.decode("latin-1"), topic, queue_ids)

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The request headers that ask a broker for these labels (made once; read only)."""
        if self._headers is not None:
            return self._headers
        headers = [(BROKER_GROUP_HEADER, self.group.encode("latin-1"))]
        if self.queue_ids:
            pairs = ",".join(f"{local}={cluster}" for local, cluster in self.queue_ids.items())
            headers.append((QUEUE_IDS_HEADER, pairs.encode()))
        object.__setattr__(self, "_headers", headers)
        return headers

    def queue_id(self, local: int) -> int:
        """The cluster-wide id of the topic's local queue ``local``."""
        return self.queue_ids.get(local, local)

    def apply(self, items: Iterable[dict[str, Any]], *, tag: bool) -> None:
        """Cluster-wide queue ids in ``items`` (messages, receipts or queue positions) that
        are of the topic (not of a retry topic); with ``tag``, ``broker_group`` on each."""
        topic, queue_ids, group = self.topic, self.queue_ids, self.group
        if not queue_ids and not tag:
            return  # nothing to change
        for item in items:
            if queue_ids and item.get("queue_topic") is None and item.get("topic", topic) == topic:
                local = item.get("queue_id")
                if isinstance(local, int):
                    item["queue_id"] = queue_ids.get(local, local)
            if tag:
                item["broker_group"] = group

    def handle(self, handle: str) -> str:
        """A receipt handle as the proxy's client holds it."""
        return prefix_handle(self.group, handle)


_LABELS: dict[tuple[str, str], tuple[TopicRoute, ClusterLabels]] = {}
"""The labels of a topic and group, with the route they were made from."""
_MAX_LABELS: Final = 4096


def prefix_handle(group: str, handle: str) -> str:
    return f"{group}{HANDLE_SEPARATOR}{handle}"


def split_handle(handle: str) -> tuple[str, str] | None:
    """``(broker group, broker's handle)`` of a proxied handle, or None when it is not one."""
    group, sep, inner = handle.partition(HANDLE_SEPARATOR)
    if not sep or not group or not inner:
        return None
    return group, inner

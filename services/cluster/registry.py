"""The route table in etcd: read a :class:`ClusterView`, write topic routes, follow changes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from services.background import BackgroundTask
from services.cluster.etcd import EtcdClient, WatchEvent
from services.cluster.route_table import ClusterKeys, ClusterView, TopicRoute
from services.errors import EtcdUnavailableError

log = logging.getLogger(__name__)


class RouteRegistry:
    """Reads and writes one cluster's route table; keeps a cached view fresh with a watch.

    The watch's changes are applied to the keys last read: a change of one key (a broker
    publishes its confirmed offset every half second under writes) costs no read of the whole
    table, and a topic's route is parsed again only when its own key changes.

    While etcd is down the last view read stays in :attr:`view`, so a broker or proxy keeps
    routing to the masters it knew.
    """

    def __init__(self, etcd: EtcdClient, cluster: str) -> None:
        self.etcd = etcd
        self.keys = ClusterKeys(cluster)
        self.view = ClusterView(cluster)
        self.listeners: list[Callable[[ClusterView], None]] = []
        self._following = BackgroundTask("route-registry", self._follow)
        self._members: dict[str, bytes] = {}  # the keys under groups/ (and any other)
        self._routes: dict[str, TopicRoute] = {}  # by key: the topics' routes

    async def refresh(self) -> ClusterView:
        """Read the whole route table at one revision."""
        kvs, revision = await self.etcd.get_prefix(self.keys.prefix)
        view = ClusterView.from_kvs(self.keys.cluster, revision, ((kv.key, kv.value) for kv in kvs))
        if view.revision >= self.view.revision:
            topics = self.keys.topics_prefix
            self._members = {kv.key: kv.value for kv in kvs if not kv.key.startswith(topics)}
            self._routes = {self.keys.topic(name): route for name, route in view.topics.items()}
        self._publish(view)
        return view

    def apply(self, events: list[WatchEvent]) -> None:
        """The watch's changes on the view (those at or before its revision are in it)."""
        revision = self.view.revision
        fresh = [e for e in events if e.kv.mod_revision > revision]
        if not fresh:
            return
        topics_changed = False
        for event in fresh:
            key = event.kv.key
            if key.startswith(self.keys.topics_prefix):
                topics_changed = True
                if event.type == "DELETE":
                    self._routes.pop(key, None)
                else:
                    self._routes[key] = TopicRoute.from_json(event.kv.value)
            elif event.type == "DELETE":
                self._members.pop(key, None)
            else:
                self._members[key] = event.kv.value
        latest = max(e.kv.mod_revision for e in fresh)
        groups = ClusterView.from_kvs(self.keys.cluster, latest, self._members.items()).groups
        topics = self.view.topics
        if topics_changed:
            topics = {route.topic: route for route in self._routes.values()}
        self._publish(ClusterView(self.keys.cluster, latest, groups, topics))

    async def put_topic_route(self, route: TopicRoute) -> None:
        await self.etcd.put(self.keys.topic(route.topic), route.to_json())

    def start(self) -> None:
        """Follow changes in the background (read, then watch; again on a break)."""
        self._following.start()

    async def stop(self) -> None:
        await self._following.stop()

    def _publish(self, view: ClusterView) -> None:
        if view.revision < self.view.revision:
            return
        self.view = view
        for listener in list(self.listeners):
            listener(view)

    def _apply_pending(self, pending: list[WatchEvent]) -> None:
        events = pending[:]
        pending.clear()
        try:
            self.apply(events)
        except Exception:  # a bad value: the view stays as it was until the next full read
            log.exception("route table: a change could not be applied")

    async def _follow(self) -> None:
        backoff = 0.2
        while True:
            try:
                view = await self.refresh()
                backoff = 0.2
                pending: list[WatchEvent] = []
                loop = asyncio.get_running_loop()
                async for event in self.etcd.watch_prefix(self.keys.prefix, view.revision + 1):
                    if not pending:  # the events of one answer (a transaction's) go together
                        loop.call_soon(self._apply_pending, pending)
                    pending.append(event)
            except EtcdUnavailableError as exc:
                log.warning("route table: %s; keeping the last view", exc)
            except Exception:  # a watch must outlive any one bad answer
                log.exception("route table: watch failed")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

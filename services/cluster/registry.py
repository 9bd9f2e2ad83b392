"""The route table in etcd: read a :class:`ClusterView`, write topic routes, follow changes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from services.cluster.etcd import EtcdClient
from services.cluster.route_table import ClusterKeys, ClusterView, TopicRoute
from services.errors import EtcdUnavailableError

log = logging.getLogger(__name__)


class RouteRegistry:
    """Reads and writes one cluster's route table; keeps a cached view fresh with a watch.

    While etcd is down the last view read stays in :attr:`view`, so a broker or proxy keeps
    routing to the masters it knew.
    """

    def __init__(self, etcd: EtcdClient, cluster: str) -> None:
        self.etcd = etcd
        self.keys = ClusterKeys(cluster)
        self.view = ClusterView(cluster)
        self.listeners: list[Callable[[ClusterView], None]] = []
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> ClusterView:
        """Read the whole route table at one revision."""
        kvs, revision = await self.etcd.get_prefix(self.keys.prefix)
        view = ClusterView.from_kvs(self.keys.cluster, revision, ((kv.key, kv.value) for kv in kvs))
        self._publish(view)
        return view

    async def put_topic_route(self, route: TopicRoute) -> None:
        await self.etcd.put(self.keys.topic(route.topic), route.to_json())

    def start(self) -> None:
        """Follow changes in the background (re-read on every change, re-watch on a break)."""
        if self._task is None:
            self._task = asyncio.create_task(self._follow(), name="route-registry")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _publish(self, view: ClusterView) -> None:
        if view.revision < self.view.revision:
            return
        self.view = view
        for listener in list(self.listeners):
            listener(view)

    async def _follow(self) -> None:
        backoff = 0.2
        while True:
            try:
                view = await self.refresh()
                backoff = 0.2
                async for _ in self.etcd.watch_prefix(self.keys.prefix, view.revision + 1):
                    view = await self.refresh()
            except EtcdUnavailableError as exc:
                log.warning("route table: %s; keeping the last view", exc)
            except Exception:  # a watch must outlive any one bad answer
                log.exception("route table: watch failed")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

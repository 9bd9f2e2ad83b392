"""Broker: the composition root that owns the store, the config files and background tasks.

Lifecycle::

    NEW ──start()──► STARTING ──► RUNNING ──stop()──► STOPPING ──► STOPPED
                         └──(open or load fails)──► FAILED

``start()`` opens the store (lock, load, recover) and loads the config files in a worker thread,
so the event loop keeps answering ``/healthz`` during a long recovery. ``stop()`` answers every
parked long-poll, persists offsets and configs, and closes the store (which removes ``abort``).

The store stays private: the HTTP layer reaches it only through the services. Every put goes
through one :class:`~services.appender.Appender` (append, then wait until durable).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from services.appender import Appender
from services.dlq import DlqService
from services.durability import DurabilityTracker
from services.errors import BrokerUnavailableError
from services.groups import GroupPolicy, GroupService
from services.long_poll import WaiterRegistry
from services.messages import MessageQueryService
from services.metrics import Metrics
from services.offset_reset import OffsetResetService
from services.offsets import OffsetPersister, OffsetService
from services.pop.persister import PopStatePersister
from services.pop.revive import ReviveService
from services.pop.service import PopService
from services.pull import PullService
from services.schedule import DelayScheduler
from services.send import SendLimits, SendService
from services.send_back import SendBackService
from services.store_status import StoreGauges, StoreStatusService
from services.topics import TopicPolicy, TopicService
from storage import MessageStore, StoreConfig
from storage.config_managers import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)

log = logging.getLogger(__name__)


class BrokerState(Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    """Everything the broker needs, passed in by the app (which reads settings)."""

    store_dir: Path
    store: StoreConfig = field(default_factory=StoreConfig)
    topics: TopicPolicy = field(default_factory=TopicPolicy)
    groups: GroupPolicy = field(default_factory=GroupPolicy)
    send: SendLimits = field(default_factory=SendLimits)
    max_parked_pulls: int = 10_000  # beyond this a pull that would park is refused
    max_wait_ms: int = 30_000  # longer long-polls are cut to this
    retry_after_s: int = 1  # what a refused pull is told
    offset_persist_interval_s: float = 5.0


class Broker:
    """One store directory behind the services."""

    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.state = BrokerState.NEW
        self.failure: BaseException | None = None
        self.metrics = Metrics()
        self.waiters = WaiterRegistry(config.max_parked_pulls, config.retry_after_s)
        config_dir = config.store_dir / "config"
        self.topic_configs = TopicConfigManager(config_dir)
        self.group_configs = SubscriptionGroupManager(config_dir)
        self.consumer_offsets = ConsumerOffsetManager(config_dir)
        self.delay_offsets = DelayOffsetManager(config_dir)
        self._offset_persister = OffsetPersister(
            self.consumer_offsets, config.offset_persist_interval_s
        )
        self._store: MessageStore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._services: _Services | None = None
        self._durability: DurabilityTracker | None = None
        self._scheduler: DelayScheduler | None = None
        self._index_catch_up: asyncio.Task[None] | None = None
        self._revive: ReviveService | None = None
        self._pop_persister: PopStatePersister | None = None

    # ================================================================== lifecycle

    async def start(self) -> None:
        """Open the store and load the configs (in a worker thread), then start tasks."""
        if self.state is not BrokerState.NEW:
            raise RuntimeError(f"a broker starts once; this one is {self.state.value}")
        self.state = BrokerState.STARTING
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:
            store = await asyncio.to_thread(self._open)
        except BaseException as exc:
            self.failure = exc
            self.state = BrokerState.FAILED
            raise
        self._store = store
        self._durability = DurabilityTracker(store)
        self._durability.start()
        appender = Appender(store, self._durability)
        store.start_services()
        self._services = _Services.build(self, store, appender)
        await asyncio.to_thread(self._services.pop.load)  # in-flight state from the revive log
        store.arrival_listeners.append(self._on_arrival)
        self._revive = ReviveService(self._services.pop, self._services.topics)
        self._revive.start()
        self._pop_persister = PopStatePersister(
            self._services.pop, self.config.offset_persist_interval_s
        )
        self._pop_persister.start()
        self._offset_persister.start()
        self._scheduler = DelayScheduler(store, self.delay_offsets, appender.put)
        await self._scheduler.start()
        self._index_catch_up = asyncio.create_task(self._catch_up_index(), name="index-catch-up")
        self.state = BrokerState.RUNNING
        log.info("broker running on %s", self.config.store_dir)

    def _open(self) -> MessageStore:
        # The key index is rebuilt after an unclean exit while the broker already serves.
        config = dataclasses.replace(self.config.store, index_catch_up_on_open=False)
        store = MessageStore.open(self.config.store_dir, config)
        try:
            for manager in self._config_managers:
                manager.load()
        except BaseException:
            store.close()
            raise
        return store

    def begin_shutdown(self) -> None:
        """Answer every parked long-poll now and refuse new parks (the server is stopping)."""
        self.waiters.close()
        if self._services is not None:  # end paced redrives and redrive jobs
            self._services.dlq.begin_shutdown()

    async def stop(self) -> None:
        """Answer parked pulls, persist offsets and configs, close the store."""
        if self.state is not BrokerState.RUNNING:
            if self.state is BrokerState.STARTING:
                log.warning("stopping a broker that never finished starting")
            return
        self.state = BrokerState.STOPPING
        self.begin_shutdown()
        await asyncio.sleep(0)  # let woken pulls write their answers
        if self._revive is not None:
            await self._revive.stop()
        if self._pop_persister is not None:
            await self._pop_persister.stop()
        await self._offset_persister.stop()
        if self._index_catch_up is not None:
            self._index_catch_up.cancel()
            await asyncio.gather(self._index_catch_up, return_exceptions=True)
        if self._scheduler is not None:
            await self._scheduler.stop()
        store = self._require_store()
        # The flushers do their last flush; then every put still waiting is answered.
        await asyncio.to_thread(store.stop_services)
        if self._durability is not None:
            self._durability.stop()
        await asyncio.to_thread(self._close, store)
        self.state = BrokerState.STOPPED
        log.info("broker stopped; store %s closed", self.config.store_dir)

    def _close(self, store: MessageStore) -> None:
        try:
            for manager in self._config_managers:
                manager.persist_if_dirty()
        finally:
            store.close()

    @property
    def _config_managers(
        self,
    ) -> tuple[
        TopicConfigManager, SubscriptionGroupManager, ConsumerOffsetManager, DelayOffsetManager
    ]:
        return (self.topic_configs, self.group_configs, self.consumer_offsets, self.delay_offsets)

    async def _catch_up_index(self) -> None:
        """Rebuild the key index in slices so the loop keeps serving meanwhile."""
        store = self._require_store()
        caught_up = False
        while not caught_up:
            caught_up = store.catch_up_index(max_records=5000)
            await asyncio.sleep(0)  # yield to requests between slices

    # ================================================================== access

    @property
    def running(self) -> bool:
        return self.state is BrokerState.RUNNING

    def _require_store(self) -> MessageStore:
        if self._store is None:
            raise BrokerUnavailableError(f"the broker is {self.state.value}: no store yet")
        return self._store

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the broker has not been started")
        return self._loop

    @property
    def services(self) -> _Services:
        """The services, once RUNNING; BrokerUnavailableError before and after."""
        if self.state is not BrokerState.RUNNING or self._services is None:
            raise BrokerUnavailableError(f"the broker is {self.state.value}")
        return self._services

    @property
    def send(self) -> SendService:
        return self.services.send

    @property
    def pull(self) -> PullService:
        return self.services.pull

    @property
    def topics(self) -> TopicService:
        return self.services.topics

    @property
    def groups(self) -> GroupService:
        return self.services.groups

    @property
    def offsets(self) -> OffsetService:
        return self.services.offsets

    @property
    def messages(self) -> MessageQueryService:
        return self.services.messages

    @property
    def send_back(self) -> SendBackService:
        return self.services.send_back

    @property
    def offset_reset(self) -> OffsetResetService:
        return self.services.offset_reset

    @property
    def dlq(self) -> DlqService:
        return self.services.dlq

    @property
    def store_status(self) -> StoreStatusService:
        return self.services.store_status

    @property
    def pop(self) -> PopService:
        return self.services.pop

    @property
    def scheduler(self) -> DelayScheduler:
        if self._scheduler is None:
            raise BrokerUnavailableError(f"the broker is {self.state.value}")
        return self._scheduler

    @property
    def offset_persist_count(self) -> int:
        return self._offset_persister.persist_count

    # ================================================================== gauges

    def store_gauges(self) -> StoreGauges:
        """The store's positions right now (call on the event loop thread)."""
        return self.store_status.gauges()

    # ================================================================== arrivals

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        """Store arrival listener: wake the long-polls of (topic, queue_id)."""
        del max_offset
        if threading.get_ident() == self._loop_thread:
            self.waiters.notify(topic, queue_id, tags_code)
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self.waiters.notify, topic, queue_id, tags_code)


@dataclass(frozen=True, slots=True)
class _Services:
    topics: TopicService
    groups: GroupService
    offsets: OffsetService
    send: SendService
    pull: PullService
    messages: MessageQueryService
    send_back: SendBackService
    offset_reset: OffsetResetService
    dlq: DlqService
    store_status: StoreStatusService
    pop: PopService

    @classmethod
    def build(cls, broker: Broker, store: MessageStore, appender: Appender) -> _Services:
        config = broker.config
        put = appender.put
        topics = TopicService(store, broker.topic_configs, broker.consumer_offsets, config.topics)
        groups = GroupService(broker.group_configs, broker.consumer_offsets, config.groups)
        offsets = OffsetService(store, broker.consumer_offsets, topics, groups)
        send_back = SendBackService(store, groups.for_use, topics.ensure, put)
        return cls(
            topics=topics,
            groups=groups,
            offsets=offsets,
            send=SendService(
                topics, put, broker.metrics, config.send, delay_levels=store.delay_levels
            ),
            pull=PullService(
                store,
                topics,
                groups,
                offsets,
                broker.waiters,
                broker.metrics,
                max_wait_ms=config.max_wait_ms,
            ),
            messages=MessageQueryService(store, topics),
            send_back=send_back,
            offset_reset=OffsetResetService(store, broker.consumer_offsets, topics, groups),
            dlq=DlqService(store, topics.for_send, put),
            store_status=StoreStatusService(store, config.store_dir),
            pop=PopService(
                store,
                config.store_dir / "config",
                topics,
                groups,
                offsets,
                broker.consumer_offsets,
                send_back,
                put,
                broker.waiters,
                broker.metrics,
                max_wait_ms=config.max_wait_ms,
            ),
        )

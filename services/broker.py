"""Broker: the composition root that owns the store, the config files and background tasks.

Lifecycle::

    NEW ──start()──► STARTING ──► RUNNING ──stop()──► STOPPING ──► STOPPED
                         └──(open or load fails)──► FAILED

``start()`` opens the store (lock, load, recover) and loads the config files in a worker thread,
so the event loop keeps answering ``/healthz`` during a long recovery. ``stop()`` answers every
parked long-poll, persists offsets and configs, and closes the store (which removes ``abort``).

A broker is a **master** or a read-only **slave**: its :class:`~services.ha.role.ReplicaRole`
(``broker.replica``) holds the role, the epochs and the write fence, runs the HA server or
client and the config sync, and changes the role at run time (``promote()``, ``follow()``,
driven by a failover controller). The broker lends it the store, the appender and a way to
start the write-side tasks (POP, revive, delay scheduler, persisters) that only a master runs.

The store stays private: the HTTP layer reaches it only through the services. Every put goes
through one :class:`~services.appender.Appender` (append, then wait until durable).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Awaitable
from enum import Enum

from services.appender import Appender
from services.background import BackgroundTask
from services.broker_config import BrokerConfig
from services.dispatch_retry import DispatchRetry
from services.dlq import DlqService
from services.durability import DurabilityTracker
from services.errors import BrokerUnavailableError
from services.groups import GroupService
from services.ha.config_sync import ConfigManager
from services.ha.role import ReplicaRole, RoleHost
from services.long_poll import WaiterRegistry
from services.messages import MessageQueryService
from services.metrics import Metrics
from services.offset_reset import OffsetResetService
from services.offsets import OffsetPersister, OffsetService
from services.pop.persister import PopStatePersister
from services.pop.revive import ReviveService
from services.pop.service import PopService
from services.pull import PullService
from services.record_reads import RecordReadService
from services.redrive_jobs import RedriveJobs
from services.schedule import DelayScheduler
from services.send import SendService
from services.send_back import SendBackService
from services.store_status import StoreGauges, StoreStatusService
from services.timer.service import TimerService
from services.topics import TopicService
from services.trace.timers import TracedTimerPuts
from services.transaction.check import TransactionCheckService
from services.transaction.service import TransactionService
from services.wiring import BrokerServices
from storage import MessageStore, StorageError
from storage.config_managers import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)

log = logging.getLogger(__name__)


async def _logged(what: str, stopping: Awaitable[None]) -> None:
    """Await one shutdown step; an error is logged, not raised."""
    try:
        await stopping
    except Exception:
        log.exception("stopping %s failed", what)


class BrokerState(Enum):
    NEW = "new"
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


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
        self.replica = ReplicaRole(
            config,
            config.store_dir,
            self._config_files,
            config.store.sync_flush_timeout_ms / 1000,
        )
        self._store: MessageStore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._services: BrokerServices | None = None
        self._durability: DurabilityTracker | None = None
        self._dispatch_retry: DispatchRetry | None = None
        self._scheduler: DelayScheduler | None = None
        self._timers: TimerService | None = None
        self._index_catch_up: BackgroundTask | None = None
        self._revive: ReviveService | None = None
        self._pop_persister: PopStatePersister | None = None
        self._transaction_check: TransactionCheckService | None = None
        self._write_tasks_started = False

    # ================================================================== lifecycle

    async def start(self) -> None:
        """Open the store and load the configs (in worker threads), then start tasks."""
        if self.state is not BrokerState.NEW:
            raise RuntimeError(f"a broker starts once; this one is {self.state.value}")
        self.state = BrokerState.STARTING
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:
            store = await self.replica.open_store(self._open_store)
            await asyncio.to_thread(self._load_configs, store)
        except BaseException as exc:
            self.failure = exc
            self.state = BrokerState.FAILED
            raise
        self._store = store
        self._durability = DurabilityTracker(store)
        self._durability.start()
        self._dispatch_retry = DispatchRetry(store)
        self._dispatch_retry.start()
        appender = Appender(store, self._durability)
        store.start_services()
        services = self._services = BrokerServices.build(
            self.config,
            store,
            appender,
            topic_configs=self.topic_configs,
            group_configs=self.group_configs,
            consumer_offsets=self.consumer_offsets,
            metrics=self.metrics,
            waiters=self.waiters,
            on_slave=lambda: self.replica.role == "slave",
        )
        store.arrival_listeners.append(self._on_arrival)
        # Built on a slave too (its delay progress is readable), started only on a master.
        self._scheduler = DelayScheduler(store, self.delay_offsets, services.idempotency.reput)
        traced = TracedTimerPuts(services.tracer, appender.put, services.idempotency)
        self._timers = TimerService(
            store,
            traced.put,
            traced,
            self.config.group,
            broker_name=self.config.broker_name,
            fired_horizon_ms=int(self.config.dedup_window_s * 1000),
        )
        host = RoleHost(
            store,
            appender,
            self._start_write_tasks,
            services.idempotency.begin_writing,
            self._timer_progress,
        )
        try:
            await self.replica.start(host)
        except BaseException as exc:
            self.failure = exc
            self.state = BrokerState.FAILED
            await self.replica.stop()
            await self._dispatch_retry.stop()
            await asyncio.to_thread(store.stop_services)
            await asyncio.to_thread(self._close, store)
            raise
        self._index_catch_up = BackgroundTask("index-catch-up", services.idempotency.catch_up_index)
        self._index_catch_up.start()
        if services.tracer.writer is not None:
            services.tracer.writer.start()
        self.state = BrokerState.RUNNING
        log.info(
            "broker %s running as %s on %s",
            self.config.broker_name,
            self.replica.role,
            self.config.store_dir,
        )

    async def _start_write_tasks(self) -> None:
        """What only a master runs: POP state, revive, persisters, the delay scheduler, the
        timer wheel, transaction check-back."""
        services = self._built_services()
        await asyncio.to_thread(services.pop.load)  # in-flight state from the revive log
        self._revive = ReviveService(services.pop, services.topics, services.idempotency.reput)
        self._revive.start()
        self._pop_persister = PopStatePersister(services.pop, self.config.offset_persist_interval_s)
        self._pop_persister.start()
        self._offset_persister.start()
        await self.scheduler.start()
        await asyncio.to_thread(services.transactions.load)  # from the transaction topics
        self._transaction_check = TransactionCheckService(services.transactions)
        self._transaction_check.start()
        if self.config.store.timer.enabled:
            await self.timers.start()
        self._write_tasks_started = True

    def _timer_progress(self) -> dict[str, int] | None:
        progress = self._timers.master_progress() if self._timers is not None else None
        return None if progress is None else progress.to_json()

    def _open_store(self) -> MessageStore:
        # The key index is rebuilt after an unclean exit while the broker already serves.
        config = dataclasses.replace(self.config.store, index_catch_up_on_open=False)
        return MessageStore.open(self.config.store_dir, config)

    def _load_configs(self, store: MessageStore) -> None:
        try:
            for manager in self._config_files.values():
                manager.load()
        except BaseException:
            store.close()
            raise

    def begin_shutdown(self) -> None:
        """Answer every parked long-poll now and refuse new parks (the server is stopping)."""
        self.waiters.close()
        if self._services is not None:  # end paced redrives and redrive jobs
            self._services.dlq.begin_shutdown()
            self._services.redrive_jobs.begin_shutdown()

    async def stop(self) -> None:
        """Answer parked pulls, persist offsets and configs, close the store."""
        if self.state is not BrokerState.RUNNING:
            if self.state is BrokerState.STARTING:
                log.warning("stopping a broker that never finished starting")
            return
        self.state = BrokerState.STOPPING
        writer = self._services.tracer.writer if self._services is not None else None
        if writer is not None:  # what waits is stored while the store still takes it
            await _logged("the trace writer", writer.stop())
        self.replica.freeze()
        self.begin_shutdown()
        await asyncio.sleep(0)  # let woken pulls write their answers
        await self.replica.stop()
        # A step that fails (a config save meeting a failed disk) is logged; the store is
        # closed all the same.
        if self._revive is not None:
            await _logged("the revive service", self._revive.stop())
        if self._pop_persister is not None:
            await _logged("the POP state persister", self._pop_persister.stop())
        if self._transaction_check is not None:
            await _logged("the transaction check", self._transaction_check.stop())
        if self._write_tasks_started:
            await _logged("the offset persister", self._offset_persister.stop())
        if self._index_catch_up is not None:
            await self._index_catch_up.stop()
        if self._scheduler is not None and self._write_tasks_started:
            await _logged("the delay scheduler", self._scheduler.stop())
        if self._timers is not None and self._write_tasks_started:
            await _logged("the timer wheel", self._timers.stop())
        if self._dispatch_retry is not None:
            await self._dispatch_retry.stop()
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
            for name, manager in self._config_files.items():
                try:
                    manager.persist_if_dirty()
                except (OSError, StorageError):  # a full or failing disk: the last version stays
                    log.exception("could not save the %s config file at shutdown", name)
        finally:
            store.close()

    @property
    def _config_files(self) -> dict[str, ConfigManager]:
        """The config files, by the names a slave copies them under."""
        return {
            "topics": self.topic_configs,
            "subscription_groups": self.group_configs,
            "consumer_offsets": self.consumer_offsets,
            "delay_offsets": self.delay_offsets,
        }

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

    def _built_services(self) -> BrokerServices:
        if self._services is None:
            raise BrokerUnavailableError(f"the broker is {self.state.value}")
        return self._services

    @property
    def services(self) -> BrokerServices:
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
    def records(self) -> RecordReadService:
        return self.services.records

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
    def redrive_jobs(self) -> RedriveJobs:
        return self.services.redrive_jobs

    @property
    def store_status(self) -> StoreStatusService:
        return self.services.store_status

    @property
    def pop(self) -> PopService:
        return self.services.pop

    @property
    def transactions(self) -> TransactionService:
        return self.services.transactions

    @property
    def scheduler(self) -> DelayScheduler:
        if self._scheduler is None:
            raise BrokerUnavailableError(f"the broker is {self.state.value}")
        return self._scheduler

    @property
    def timers(self) -> TimerService:
        if self._timers is None:
            raise BrokerUnavailableError(f"the broker is {self.state.value}")
        return self._timers

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

"""Broker: the composition root that owns the store, the config files and background tasks.

Lifecycle::

    NEW ──start()──► STARTING ──► RUNNING ──stop()──► STOPPING ──► STOPPED
                         └──(open or load fails)──► FAILED

``start()`` opens the store (lock, load, recover) and loads the config files in a worker thread,
so the event loop keeps answering ``/healthz`` during a long recovery. ``stop()`` answers every
parked long-poll, persists offsets and configs, and closes the store (which removes ``abort``).

A broker is a **master** or a read-only **slave** (``BrokerConfig.role``). A master records a
new epoch when it starts, runs the write-side tasks (POP, revive, delay scheduler,
persisters) and, with ``ha_listen``, streams its CommitLog to slaves (:mod:`services.ha`).
A slave replicates from ``master`` and copies its configs; ``promote()`` and ``follow()``
change that at run time (a failover controller drives them).

The store stays private: the HTTP layer reaches it only through the services. Every put goes
through one :class:`~services.appender.Appender` (append, then wait until durable).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Literal

import httpx

from services.appender import Appender
from services.dlq import DlqService
from services.dlq_watermark import DlqWatermark
from services.durability import DurabilityTracker
from services.errors import (
    BrokerUnavailableError,
    NotMasterError,
    ReplicaDivergedError,
    ReplicaRoleError,
)
from services.groups import GroupPolicy, GroupService
from services.ha.address import MasterAddress
from services.ha.client import HAClient
from services.ha.config_sync import ConfigManager, SlaveConfigSync
from services.ha.epochs import divergence_point, fetch_master_epochs
from services.ha.group_transfer import GroupTransferService
from services.ha.master import HAService
from services.ha.replication import MasterReplication
from services.ha.status import ReplicaStatus, Role
from services.idempotency import DEFAULT_WINDOW_S, IdempotencyService
from services.long_poll import WaiterRegistry
from services.messages import MessageQueryService
from services.metrics import Metrics
from services.offset_reset import OffsetResetService
from services.offsets import OffsetPersister, OffsetService
from services.pop.handles import secret_text
from services.pop.persister import PopStatePersister
from services.pop.revive import ReviveService
from services.pop.service import PopService
from services.pull import PullService
from services.redrive_jobs import RedriveJobs
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
from storage.epoch_file import EpochEntry, EpochFile
from storage.json_file import load_json
from storage.store_reader import POP_STATE_FILE
from storage.truncation import truncate_commit_log

log = logging.getLogger(__name__)

BROKER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A replica's name: it travels in the HA handshake and in the sync-state set."""


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
    dedup_window_s: float = DEFAULT_WINDOW_S  # how long an idempotency key is remembered
    # ---- replication (services.ha)
    role: Role = "master"
    replication: Literal["async", "sync"] = "async"
    broker_name: str = "broker-a"
    ha_listen: str | None = None  # a master's HA port ("127.0.0.1:0": any free port)
    master: MasterAddress | None = None  # a slave's master
    ha_max_gap_bytes: int = 256 * 1024 * 1024  # farther behind: not in sync
    ha_catch_up_window_s: float = 15.0  # not caught up for longer: not in sync
    ha_heartbeat_s: float = 1.0
    config_sync_interval_s: float = 2.0
    truncate_on_divergence: bool = True  # a slave cuts an unconfirmed tail at start
    replication_token: str | None = field(default=None, repr=False)  # for a master's auth file
    cluster_managed: bool = False  # an election picks the role (prepare_role) before start

    def __post_init__(self) -> None:
        if self.role == "slave" and self.master is None and not self.cluster_managed:
            raise ValueError("a slave needs its master's address")


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
        self._role: Role = config.role
        self._master: MasterAddress | None = config.master if config.role == "slave" else None
        self._epochs = EpochFile(config.store_dir)
        self._appender: Appender | None = None
        self._ha: HAService | None = None
        self._replication: MasterReplication | None = None
        self._ha_client: HAClient | None = None
        self._config_sync: SlaveConfigSync | None = None
        self._write_tasks_started = False
        self._start_epoch = 0  # an elected master's epoch (0: the next local one)
        self._write_block: NotMasterError | None = None
        self.sync_state_listeners: list[Callable[[frozenset[str]], None]] = []

    # ================================================================== lifecycle

    async def start(self) -> None:
        """Open the store and load the configs (in a worker thread), then start tasks."""
        if self.state is not BrokerState.NEW:
            raise RuntimeError(f"a broker starts once; this one is {self.state.value}")
        self.state = BrokerState.STARTING
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:
            remote_epochs = await self._master_epochs_for_truncation()
            store = await asyncio.to_thread(self._open, remote_epochs)
        except BaseException as exc:
            self.failure = exc
            self.state = BrokerState.FAILED
            raise
        self._store = store
        self._durability = DurabilityTracker(store)
        self._durability.start()
        appender = self._appender = Appender(store, self._durability)
        store.start_services()
        services = self._services = _Services.build(self, store, appender)
        store.arrival_listeners.append(self._on_arrival)
        # Built on a slave too (its delay progress is readable), started only on a master.
        self._scheduler = DelayScheduler(store, self.delay_offsets, services.idempotency.reput)
        try:
            if self._role == "master":
                epoch = max(self._start_epoch, self._epochs.last_epoch + 1)
                await asyncio.to_thread(self._epochs.begin, epoch, store.max_physical_offset)
                await self._start_write_tasks()
                await self._start_ha_server()
            else:
                self._start_following(self._require_master())
        except BaseException as exc:
            self.failure = exc
            self.state = BrokerState.FAILED
            await self._stop_replication()
            await asyncio.to_thread(store.stop_services)
            await asyncio.to_thread(self._close, store)
            raise
        self._index_catch_up = asyncio.create_task(
            services.idempotency.catch_up_index(), name="index-catch-up"
        )
        self.state = BrokerState.RUNNING
        log.info(
            "broker %s running as %s on %s",
            self.config.broker_name,
            self._role,
            self.config.store_dir,
        )

    async def _start_write_tasks(self) -> None:
        """What only a master runs: POP state, revive, persisters, the delay scheduler."""
        services = self._built_services()
        await asyncio.to_thread(services.pop.load)  # in-flight state from the revive log
        self._revive = ReviveService(services.pop, services.topics, services.idempotency.reput)
        self._revive.start()
        self._pop_persister = PopStatePersister(services.pop, self.config.offset_persist_interval_s)
        self._pop_persister.start()
        self._offset_persister.start()
        await self.scheduler.start()
        self._write_tasks_started = True

    def _open(self, remote_epochs: list[EpochEntry] | None) -> MessageStore:
        # The key index is rebuilt after an unclean exit while the broker already serves.
        config = dataclasses.replace(self.config.store, index_catch_up_on_open=False)
        self._epochs.load()
        store = MessageStore.open(self.config.store_dir, config)
        if remote_epochs is not None:
            point = divergence_point(self._epochs.entries, remote_epochs, store.max_physical_offset)
            if point is not None:
                log.warning(
                    "CommitLog diverges from the master after %d (ends at %d): truncating",
                    point,
                    store.max_physical_offset,
                )
                store.close()
                truncate_commit_log(self.config.store_dir, point)
                self._epochs.load()
                store = MessageStore.open(self.config.store_dir, config)
        try:
            for manager in self._config_managers:
                manager.load()
        except BaseException:
            store.close()
            raise
        return store

    async def _master_epochs_for_truncation(self) -> list[EpochEntry] | None:
        """A slave that may truncate: its master's epochs (None: not a slave, or unreachable)."""
        master = self._master
        if self._role != "slave" or master is None or not self.config.truncate_on_divergence:
            return None
        try:
            return await fetch_master_epochs(master.http_url, self._replication_headers)
        except (httpx.HTTPError, ValueError, OSError) as exc:
            log.warning(
                "cannot fetch the epochs of master %s (%s); replication checks them on connect",
                master.http_url,
                exc,
            )
            return None

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
        self.begin_shutdown()
        await asyncio.sleep(0)  # let woken pulls write their answers
        await self._stop_replication()
        if self._revive is not None:
            await self._revive.stop()
        if self._pop_persister is not None:
            await self._pop_persister.stop()
        if self._write_tasks_started:
            await self._offset_persister.stop()
        if self._index_catch_up is not None:
            self._index_catch_up.cancel()
            await asyncio.gather(self._index_catch_up, return_exceptions=True)
        if self._scheduler is not None and self._write_tasks_started:
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

    # ================================================================== replication

    @property
    def role(self) -> Role:
        return self._role

    @property
    def epoch(self) -> int:
        """The newest epoch this replica knows (its own as a master; its master's as a slave)."""
        return self._epochs.last_epoch

    @property
    def master_address(self) -> MasterAddress | None:
        """A slave's master; None on a master."""
        return self._master

    @property
    def ha_address(self) -> str | None:
        """The HA address a master listens on (the port picked when 0 was asked)."""
        return self._ha.address if self._ha is not None else None

    def prepare_role(self, role: Role, master: MasterAddress | None, epoch: int = 0) -> None:
        """Before start: the role an election gave this broker (and a master's epoch)."""
        if self.state is not BrokerState.NEW:
            raise RuntimeError("the role is prepared before the broker starts")
        if role == "slave" and master is None:
            raise ValueError("a slave needs its master's address")
        self._role = role
        self._master = master if role == "slave" else None
        self._start_epoch = epoch

    def local_epoch(self) -> int:
        """The last epoch this store recorded (reads the epoch file; before start too)."""
        return self._epochs.load().last_epoch

    @property
    def accepts_writes(self) -> bool:
        """A master not fenced off by its cluster."""
        return self._role == "master" and self._write_block is None

    def block_writes(self, error: NotMasterError) -> None:
        """Refuse writes with ``error`` (a failover in progress, or a master that lost its key)."""
        self._write_block = error

    def allow_writes(self) -> None:
        self._write_block = None

    def check_writable(self) -> None:
        """NotMasterError on a slave: writes go to the master."""
        if self._write_block is not None:
            raise self._write_block
        if self._role != "master":
            master = self._master
            if master is None:  # pragma: no cover - a slave always has a master
                raise NotMasterError("this broker is not the master", None)
            raise NotMasterError(
                f"this broker ({self.config.broker_name}) is a read-only slave; write to "
                f"the master {master.name} at {master.http_url}",
                master.http_url,
            )

    def sync_state_set(self) -> frozenset[str]:
        """The slaves in sync with this master (empty on a slave)."""
        return self._ha.sync_state_set if self._ha is not None else frozenset()

    def replica_status(self) -> ReplicaStatus:
        store = self._require_store()
        client = self._ha_client
        ha = self._ha
        return ReplicaStatus(
            role=self._role,
            epoch=self.epoch,
            broker_name=self.config.broker_name,
            max_physical_offset=store.max_physical_offset,
            confirmed_offset=store.flushed_offset,
            master=self._master,
            ha_address=self.ha_address,
            replication=self.config.replication,
            slaves=ha.slaves() if ha is not None else (),
            sync_state_set=self.sync_state_set(),
            connected=client.connected if client is not None else False,
            error=client.error if client is not None else None,
        )

    def replication_epochs(self) -> tuple[EpochEntry, ...]:
        return self._epochs.entries

    def replication_configs(self) -> dict[str, object]:
        """What a slave copies: every config file's content, the POP state file, and the secret
        that signs receipt handles (so handles stay valid when the slave takes over)."""
        self._require_store()
        return {
            "topics": self.topic_configs.to_json(),
            "subscription_groups": self.group_configs.to_json(),
            "consumer_offsets": self.consumer_offsets.to_json(),
            "delay_offsets": self.delay_offsets.to_json(),
            "pop_state": load_json(self.config.store_dir / "config" / POP_STATE_FILE) or {},
            "pop_secret": secret_text(self.config.store_dir / "config"),
        }

    async def promote(self, epoch: int) -> None:
        """Slave → master: record ``epoch`` at this log's end, start what a master runs."""
        if self.state is not BrokerState.RUNNING:
            raise BrokerUnavailableError(f"the broker is {self.state.value}")
        if self._role == "master":
            raise ReplicaRoleError(f"broker {self.config.broker_name} is already the master")
        if epoch <= self._epochs.last_epoch:
            raise ReplicaRoleError(
                f"epoch {epoch} is not after this replica's last epoch {self._epochs.last_epoch}"
            )
        await self._stop_replication()
        store = self._require_store()
        store.cut_partial_tail()  # a record the old master never finished sending
        # Keys are new only once the index covers everything this replica received.
        self._built_services().idempotency.begin_writing()
        await asyncio.to_thread(self._epochs.begin, epoch, store.max_physical_offset)
        await self._start_write_tasks()
        await self._start_ha_server()
        self._master = None
        self._role = "master"
        log.info("promoted to master at epoch %d, offset %d", epoch, store.max_physical_offset)

    async def follow(self, master: MasterAddress) -> None:
        """Re-point a slave at a new master; ReplicaDivergedError if this log diverges."""
        if self.state is not BrokerState.RUNNING:
            raise BrokerUnavailableError(f"the broker is {self.state.value}")
        if self._role != "slave":
            raise ReplicaRoleError(
                f"broker {self.config.broker_name} is a master; restart it as a slave to follow"
            )
        await self._stop_replication()
        self._require_store().cut_partial_tail()  # the new master sends whole records
        self._master = master
        client = self._new_client(master)
        try:
            await client.check()
        except ReplicaDivergedError as exc:
            client.error = str(exc)
            self._ha_client = client  # its error shows in replica_status()
            raise
        except (httpx.HTTPError, ValueError, OSError) as exc:
            log.warning("master %s not reachable yet (%s); replication retries", master.name, exc)
        self._start_following(master, client)

    def _require_master(self) -> MasterAddress:
        if self._master is None:  # pragma: no cover - BrokerConfig refuses a slave without one
            raise ReplicaRoleError("a slave needs its master's address")
        return self._master

    def _new_client(self, master: MasterAddress) -> HAClient:
        return HAClient(
            self._require_store(),
            self._epochs,
            master,
            self.config.broker_name,
            self.config.ha_heartbeat_s,
            self._replication_headers,
        )

    @property
    def _replication_headers(self) -> dict[str, str] | None:
        """What a slave presents to its master's replication routes (its auth file's token)."""
        token = self.config.replication_token
        return {"Authorization": f"Bearer {token}"} if token else None

    def _start_following(self, master: MasterAddress, client: HAClient | None = None) -> None:
        self._ha_client = client or self._new_client(master)
        self._ha_client.start()
        managers: dict[str, ConfigManager] = {
            "topics": self.topic_configs,
            "subscription_groups": self.group_configs,
            "consumer_offsets": self.consumer_offsets,
            "delay_offsets": self.delay_offsets,
        }
        self._config_sync = SlaveConfigSync(
            master.http_url,
            managers,
            self.config.store_dir / "config",
            self.config.config_sync_interval_s,
            self._replication_headers,
        )
        self._config_sync.start()

    async def _start_ha_server(self) -> None:
        if self.config.ha_listen is None:
            return
        ha = HAService(
            self._require_store(),
            self.config.ha_listen,
            max_gap_bytes=self.config.ha_max_gap_bytes,
            catch_up_window_s=self.config.ha_catch_up_window_s,
            heartbeat_s=self.config.ha_heartbeat_s,
        )
        ha.sync_state_listeners.append(self._on_sync_state)
        await ha.start()
        transfer = None
        if self.config.replication == "sync":
            timeout_s = self.config.store.sync_flush_timeout_ms / 1000
            transfer = GroupTransferService(ha, timeout_s)
        self._ha = ha
        self._replication = MasterReplication(ha, transfer)
        if self._appender is not None:
            self._appender.replication = self._replication

    async def _stop_replication(self) -> None:
        client, self._ha_client = self._ha_client, None
        if client is not None:
            await client.stop()
        sync, self._config_sync = self._config_sync, None
        if sync is not None:
            await sync.stop()
        if self._appender is not None:
            self._appender.replication = None
        replication, self._replication = self._replication, None
        if replication is not None:
            replication.close()
        ha, self._ha = self._ha, None
        if ha is not None:
            await ha.stop()

    def _on_sync_state(self, in_sync: frozenset[str]) -> None:
        for listener in list(self.sync_state_listeners):
            try:
                listener(in_sync)
            except Exception:
                log.exception("a sync-state listener failed")

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

    def _built_services(self) -> _Services:
        if self._services is None:
            raise BrokerUnavailableError(f"the broker is {self.state.value}")
        return self._services

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
    def redrive_jobs(self) -> RedriveJobs:
        return self.services.redrive_jobs

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
    redrive_jobs: RedriveJobs
    store_status: StoreStatusService
    pop: PopService
    idempotency: IdempotencyService

    @classmethod
    def build(cls, broker: Broker, store: MessageStore, appender: Appender) -> _Services:
        config = broker.config
        put = appender.put
        idempotency = IdempotencyService(store, appender, config.dedup_window_s)
        topics = TopicService(store, broker.topic_configs, broker.consumer_offsets, config.topics)
        groups = GroupService(broker.group_configs, broker.consumer_offsets, config.groups)
        offsets = OffsetService(store, broker.consumer_offsets, topics, groups)
        send_back = SendBackService(store, groups.for_use, topics.ensure, idempotency.reput)
        watermark = DlqWatermark(store, broker.consumer_offsets)
        dlq = DlqService(store, topics.for_send, idempotency, watermark)
        return cls(
            topics=topics,
            groups=groups,
            offsets=offsets,
            send=SendService(
                topics,
                put,
                broker.metrics,
                config.send,
                delay_levels=store.delay_levels,
                idempotency=idempotency,
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
            dlq=dlq,
            redrive_jobs=RedriveJobs(dlq),
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
            idempotency=idempotency,
        )

"""A broker's replica role: master or read-only slave, and every change between the two.

One object holds what the role is made of — the role itself, a slave's master, the epochs of
this CommitLog (``epoch.json``), the write fence a cluster puts up during a failover — and
runs what each role needs on top of the store: a master's HA server (and, with ``sync``
replication, the wait for in-sync slaves on every put); a slave's HA client and config sync.

Lifecycle, driven by the broker::

    prepare_role()? ──► open_store() ──► start(host)
        ──► promote() / follow() ... ──► freeze() ──► stop()

The broker hands the role what it needs when it starts (:class:`RoleHost`: the store, the
appender, a way to start the write-side tasks and to let keyed sends through); the role never
reaches back into the broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx

from services.appender import Appender
from services.errors import (
    BrokerUnavailableError,
    NoMasterError,
    NotMasterError,
    ReplicaDivergedError,
    ReplicaRoleError,
)
from services.ha.address import MasterAddress
from services.ha.client import HAClient
from services.ha.config_sync import ConfigManager, SlaveConfigSync
from services.ha.epochs import divergence_point, fetch_master_epochs
from services.ha.group_transfer import GroupTransferService
from services.ha.master import HAService
from services.ha.replication import MasterReplication
from services.ha.status import ReplicaStatus, Role
from services.pop.handles import secret_text
from services.pop.state_file import POP_STATE_FILE
from services.tls import TlsConfig
from storage import MessageStore
from storage.epoch_file import EpochEntry, EpochFile
from storage.json_file import load_json
from storage.truncation import truncate_commit_log

log = logging.getLogger(__name__)

BROKER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
"""A replica's name: it travels in the HA handshake and in the sync-state set."""

SyncStateListener = Callable[[frozenset[str]], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaConfig:
    """How a broker replicates (RocketMQ's brokerRole, HA and slave settings)."""

    role: Role = "master"
    replication: Literal["async", "sync"] = "async"
    broker_name: str = "broker-a"
    ha_listen: str | None = None  # a master's HA port ("127.0.0.1:0": any free port)
    master: MasterAddress | None = None  # a slave's master
    ha_max_gap_bytes: int = 256 * 1024 * 1024  # farther behind: not in sync
    ha_catch_up_window_s: float = 15.0  # not caught up for longer: not in sync
    ha_heartbeat_s: float = 1.0
    min_in_sync_replicas: int = 1  # fewer in sync (the master counts itself): writes refused
    config_sync_interval_s: float = 2.0
    truncate_on_divergence: bool = True  # a slave cuts an unconfirmed tail at start
    replication_token: str | None = field(default=None, repr=False)  # for a master's auth file
    # A master's: the keys slaves prove on its HA port (services.ha.auth); None: no auth file.
    ha_accepted_keys: frozenset[bytes] | None = field(default=None, repr=False)
    tls: TlsConfig | None = None  # certificate files: the HA port, https masters
    cluster_managed: bool = False  # an election picks the role (prepare_role) before start

    def __post_init__(self) -> None:
        if self.role == "slave" and self.master is None and not self.cluster_managed:
            raise ValueError("a slave needs its master's address")
        if self.min_in_sync_replicas < 1:
            raise ValueError("min_in_sync_replicas counts the master: at least 1")
        if self.min_in_sync_replicas > 1 and (self.replication != "sync" or not self.ha_listen):
            raise ValueError(
                "min_in_sync_replicas above 1 needs sync replication and an HA port (async "
                "answers a put before any slave has it)"
            )


@dataclass(frozen=True, slots=True)
class RoleHost:
    """What the broker lends the role once its store is open."""

    store: MessageStore
    appender: Appender
    start_write_tasks: Callable[[], Awaitable[None]]  # POP, revive, persisters, delays
    begin_writing: Callable[[], None]  # keyed sends wait for the key index from here on
    timer_progress: Callable[[], dict[str, int] | None] = lambda: None  # what slaves copy


class ReplicaRole:
    """This broker's place in its group, and the services each place runs."""

    def __init__(
        self,
        config: ReplicaConfig,
        store_dir: Path,
        config_files: Mapping[str, ConfigManager],
        sync_timeout_s: float,
    ) -> None:
        self.config = config
        self._store_dir = store_dir
        self._config_files = config_files  # by the names a slave fetches them under
        self._sync_timeout_s = sync_timeout_s
        self._role: Role = config.role
        self._master: MasterAddress | None = config.master if config.role == "slave" else None
        self._epochs = EpochFile(store_dir)
        self._start_epoch = 0  # an elected master's epoch (0: the next local one)
        self._write_block: NotMasterError | None = None
        self._lease_current: Callable[[], bool] | None = None  # a cluster's lease check
        self._opening = False  # the broker began to open its store: the role is settled
        self._host: RoleHost | None = None
        self._changeable = False  # promote/follow only while the broker runs
        self._ha: HAService | None = None
        self._replication: MasterReplication | None = None
        self._ha_client: HAClient | None = None
        self._config_sync: SlaveConfigSync | None = None
        self.sync_state_listeners: list[SyncStateListener] = []

    # ================================================================== state

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
        """The address a master's HA server is bound to (None on a slave, or when none was
        asked)."""
        return self._ha.address if self._ha is not None else None

    def local_epoch(self) -> int:
        """The last epoch this store recorded (reads the epoch file; before start too)."""
        return self._epochs.load().last_epoch

    def epoch_entries(self) -> tuple[EpochEntry, ...]:
        return self._epochs.entries

    def sync_state_set(self) -> frozenset[str]:
        """The slaves in sync with this master (empty on a slave)."""
        return self._ha.sync_state_set if self._ha is not None else frozenset()

    def in_sync_replicas(self) -> int:
        """A master: itself and the slaves of its sync-state set (what ``min_in_sync_replicas``
        is held against); 0 on a slave."""
        if self._role != "master":
            return 0
        replication = self._replication
        return replication.in_sync_replicas if replication is not None else 1

    def status(self) -> ReplicaStatus:
        store = self._require_host().store
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
            in_sync_replicas=self.in_sync_replicas(),
            min_in_sync_replicas=self.config.min_in_sync_replicas,
            connected=client.connected if client is not None else False,
            error=client.error if client is not None else None,
        )

    def config_snapshot(self) -> dict[str, object]:
        """What a slave copies: every config file's content, the POP state file, and the secret
        that signs receipt handles (so handles stay valid when the slave takes over)."""
        self._require_host()
        config_dir = self._store_dir / "config"
        snapshot: dict[str, object] = {
            name: manager.to_json() for name, manager in self._config_files.items()
        }
        snapshot["pop_state"] = load_json(config_dir / POP_STATE_FILE) or {}
        snapshot["pop_secret"] = secret_text(config_dir)
        snapshot["timer_progress"] = self._require_host().timer_progress()
        return snapshot

    # ================================================================== write fencing

    @property
    def accepts_writes(self) -> bool:
        """A master not fenced off by its cluster, whose master lease is current."""
        lease_current = self._lease_current
        return (
            self._role == "master"
            and self._write_block is None
            and (lease_current is None or lease_current())
        )

    def fence_by_lease(self, lease_current: Callable[[], bool]) -> None:
        """Refuse writes whenever ``lease_current()`` is false: a master whose lease etcd has
        not confirmed within its TTL may have been replaced while it could not tell."""
        self._lease_current = lease_current

    def block_writes(self, error: NotMasterError) -> None:
        """Refuse writes with ``error`` (a failover in progress, or a master that lost its key)."""
        self._write_block = error

    def allow_writes(self) -> None:
        self._write_block = None

    def check_writable(self) -> None:
        """NotMasterError on a slave: writes go to the master."""
        if self._write_block is not None:
            raise self._write_block
        lease_current = self._lease_current
        if self._role == "master" and lease_current is not None and not lease_current():
            raise NoMasterError(
                f"broker {self.config.broker_name} has not confirmed its master lease "
                "within its TTL; a failover may be under way"
            )
        if self._role != "master":
            master = self._master
            if master is None:  # pragma: no cover - a slave always has a master
                raise NotMasterError("this broker is not the master", None)
            raise NotMasterError(
                f"this broker ({self.config.broker_name}) is a read-only slave; write to "
                f"the master {master.name} at {master.http_url}",
                master.http_url,
            )

    # ================================================================== opening

    def prepare_role(self, role: Role, master: MasterAddress | None, epoch: int = 0) -> None:
        """Before start: the role an election gave this broker (and a master's epoch)."""
        if self._opening:
            raise RuntimeError("the role is prepared before the broker starts")
        if role == "slave" and master is None:
            raise ValueError("a slave needs its master's address")
        self._role = role
        self._master = master if role == "slave" else None
        self._start_epoch = epoch

    async def open_store(self, open_store: Callable[[], MessageStore]) -> MessageStore:
        """Open the store with ``open_store`` in a worker thread. A slave (with
        ``truncate_on_divergence``) first asks its master for its epochs: a log that diverges
        from them is cut back to where both agree, and opened again."""
        self._opening = True
        master_epochs = await self._master_epochs_for_truncation()
        return await asyncio.to_thread(self._open, open_store, master_epochs)

    async def _master_epochs_for_truncation(self) -> list[EpochEntry] | None:
        """A slave that may truncate: its master's epochs (None: not a slave, or unreachable)."""
        master = self._master
        if self._role != "slave" or master is None or not self.config.truncate_on_divergence:
            return None
        try:
            return await fetch_master_epochs(
                master.http_url, self._replication_headers, self.config.tls
            )
        except (httpx.HTTPError, ValueError, OSError) as exc:
            log.warning(
                "cannot fetch the epochs of master %s (%s); replication checks them on connect",
                master.http_url,
                exc,
            )
            return None

    def _open(
        self, open_store: Callable[[], MessageStore], master_epochs: list[EpochEntry] | None
    ) -> MessageStore:
        self._epochs.load()
        store = open_store()
        if master_epochs is None:
            return store
        point = divergence_point(self._epochs.entries, master_epochs, store.max_physical_offset)
        if point is None:
            return store
        log.warning(
            "CommitLog diverges from the master after %d (ends at %d): truncating",
            point,
            store.max_physical_offset,
        )
        store.close()
        truncate_commit_log(self._store_dir, point)
        self._epochs.load()
        return open_store()

    # ================================================================== running

    async def start(self, host: RoleHost) -> None:
        """A master records its epoch and runs the write side and the HA server; a slave
        follows its master. On failure the caller stops the role."""
        self._host = host
        if self._role == "master":
            epoch = max(self._start_epoch, self._epochs.last_epoch + 1)
            await asyncio.to_thread(self._epochs.begin, epoch, host.store.max_physical_offset)
            await host.start_write_tasks()
            await self._start_ha_server()
        else:
            self._start_following(self._require_master())
        self._changeable = True

    def freeze(self) -> None:
        """The broker is stopping: refuse promotion and following from now on."""
        self._changeable = False

    async def stop(self) -> None:
        """Stop replicating in either direction (the HA client or server, the config sync)."""
        self._changeable = False
        await self._stop_replication()

    async def promote(self, epoch: int) -> None:
        """Slave → master: record ``epoch`` at this log's end, start what a master runs."""
        host = self._require_changeable()
        if self._role == "master":
            raise ReplicaRoleError(f"broker {self.config.broker_name} is already the master")
        if epoch <= self._epochs.last_epoch:
            raise ReplicaRoleError(
                f"epoch {epoch} is not after this replica's last epoch {self._epochs.last_epoch}"
            )
        await self._stop_replication()
        store = host.store
        store.cut_partial_tail()  # a record the old master never finished sending
        # Keys are new only once the index covers everything this replica received.
        host.begin_writing()
        await asyncio.to_thread(self._epochs.begin, epoch, store.max_physical_offset)
        await host.start_write_tasks()
        await self._start_ha_server()
        self._master = None
        self._role = "master"
        log.info("promoted to master at epoch %d, offset %d", epoch, store.max_physical_offset)

    async def follow(self, master: MasterAddress) -> None:
        """Re-point a slave at a new master; ReplicaDivergedError if this log diverges."""
        host = self._require_changeable()
        if self._role != "slave":
            raise ReplicaRoleError(
                f"broker {self.config.broker_name} is a master; restart it as a slave to follow"
            )
        await self._stop_replication()
        host.store.cut_partial_tail()  # the new master sends whole records
        self._master = master
        client = self._new_client(master)
        try:
            await client.check()
        except ReplicaDivergedError as exc:
            client.error = str(exc)
            self._ha_client = client  # its error shows in status()
            raise
        except (httpx.HTTPError, ValueError, OSError) as exc:
            log.warning("master %s not reachable yet (%s); replication retries", master.name, exc)
        self._start_following(master, client)

    # ================================================================== internals

    def _require_host(self) -> RoleHost:
        if self._host is None:
            raise BrokerUnavailableError("the broker has not opened its store yet")
        return self._host

    def _require_changeable(self) -> RoleHost:
        if not self._changeable or self._host is None:
            raise BrokerUnavailableError("the broker is not running")
        return self._host

    def _require_master(self) -> MasterAddress:
        if self._master is None:  # pragma: no cover - ReplicaConfig refuses a slave without one
            raise ReplicaRoleError("a slave needs its master's address")
        return self._master

    def _new_client(self, master: MasterAddress) -> HAClient:
        return HAClient(
            self._require_host().store,
            self._epochs,
            master,
            self.config.broker_name,
            self.config.ha_heartbeat_s,
            self._replication_headers,
            self.config.replication_token,
            self.config.tls,
        )

    @property
    def _replication_headers(self) -> dict[str, str] | None:
        """What a slave presents to its master's replication routes (its auth file's token)."""
        token = self.config.replication_token
        return {"Authorization": f"Bearer {token}"} if token else None

    def _start_following(self, master: MasterAddress, client: HAClient | None = None) -> None:
        self._ha_client = client or self._new_client(master)
        self._ha_client.start()
        self._config_sync = SlaveConfigSync(
            master.http_url,
            self._config_files,
            self._store_dir / "config",
            self.config.config_sync_interval_s,
            self._replication_headers,
            self.config.tls,
        )
        self._config_sync.start()

    async def _start_ha_server(self) -> None:
        if self.config.ha_listen is None:
            return
        ha = HAService(
            self._require_host().store,
            self.config.ha_listen,
            max_gap_bytes=self.config.ha_max_gap_bytes,
            catch_up_window_s=self.config.ha_catch_up_window_s,
            heartbeat_s=self.config.ha_heartbeat_s,
            accepted_keys=self.config.ha_accepted_keys,
            tls=self.config.tls,
        )
        ha.sync_state_listeners.append(self._on_sync_state)
        await ha.start()
        transfer = None
        min_in_sync = self.config.min_in_sync_replicas
        if self.config.replication == "sync":
            transfer = GroupTransferService(ha, self._sync_timeout_s, min_in_sync - 1)
        self._ha = ha
        self._replication = MasterReplication(ha, transfer, min_in_sync)
        self._require_host().appender.replication = self._replication

    async def _stop_replication(self) -> None:
        client, self._ha_client = self._ha_client, None
        if client is not None:
            await client.stop()
        sync, self._config_sync = self._config_sync, None
        if sync is not None:
            await sync.stop()
        if self._host is not None:
            self._host.appender.replication = None
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

"""A broker as a member of a cluster: its lease, what it publishes, and its part in failover.

Each broker grants a lease and keeps it alive (every TTL/3, from a thread of its own while the
event loop answers: :mod:`services.cluster.heartbeat`); its ``brokers/<name>`` key hangs
on that lease and is refreshed about every 500 ms with its role, epoch and confirmed offset.
A master also holds the group's ``master`` key on the same lease and writes ``sync_state``
whenever its set of in-sync slaves changes.

At start a broker asked to be master campaigns; if another holds the key it starts as that
master's slave instead. A slave watches the master key: when it goes (the lease lapsed) the
eligible slaves campaign (:mod:`services.cluster.election`), the winner is promoted and the
others follow it. While etcd is unreachable nothing changes with sync replication: the master
keeps serving (a PUT_OK needs an in-sync slave, which stops acking once promoted); with async
replication the master stops acknowledging a lease TTL after etcd last confirmed its lease,
before a successor can be elected (:mod:`services.cluster.heartbeat`). A
master that finds, once etcd answers, that another broker holds the key stops taking writes
and reports a fatal condition (the process exits; restarted, it rejoins as a slave).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from services.background import BackgroundLoop, OnFailure
from services.cluster.election import (
    EpochRecord,
    SyncState,
    campaign,
    first_candidate,
    may_campaign,
    may_campaign_at_start,
    read_epoch,
    republish_master,
)
from services.cluster.etcd import Compare, EtcdClient, EtcdLeaseClient, KeyValue, put_op
from services.cluster.heartbeat import LeaseHeartbeat
from services.cluster.registry import RouteRegistry
from services.cluster.route_table import BrokerMember, ClusterKeys, spread_queues
from services.errors import (
    ClusterJoinError,
    EtcdUnavailableError,
    MasterRoleLostError,
    NoMasterError,
    ReplicaDivergedError,
)
from services.ha.address import MasterAddress
from services.tls import TlsConfig
from services.topics import SYSTEM_TOPICS
from storage import PutStatus

if TYPE_CHECKING:
    from services.broker import Broker

log = logging.getLogger(__name__)

FatalHook = Callable[[BaseException], None]


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Where the broker belongs and how it talks to etcd."""

    cluster: str
    group: str
    etcd_endpoints: Sequence[str]
    http_url: str  # how others reach this broker over HTTP
    ha_address: str  # the HA HOST:PORT this broker streams on once master
    lease_ttl_s: int = 3
    loop_stall_limit_s: float | None = None  # loop silent longer: lease left to lapse (2/3 TTL)
    publish_interval_s: float = 0.5
    campaign_grace_s: float = 1.0
    join_timeout_s: float = 30.0
    tls: TlsConfig | None = None  # https etcd endpoints: checked against its CA


class ClusterMember:
    """Runs one broker's membership, election and failover against etcd."""

    def __init__(
        self, broker: Broker, config: ClusterConfig, on_fatal: FatalHook | None = None
    ) -> None:
        self.broker = broker
        self.replica = broker.replica
        self.config = config
        self.keys = ClusterKeys(config.cluster)
        self.etcd = EtcdClient(config.etcd_endpoints, tls=config.tls)
        self.registry = RouteRegistry(self.etcd, config.cluster)
        self.on_fatal = on_fatal
        self.lease = 0
        self.heartbeat = LeaseHeartbeat(
            EtcdLeaseClient(
                config.etcd_endpoints,
                timeout_s=max(config.lease_ttl_s / 3, 0.2),
                tls=config.tls,
            ),
            config.lease_ttl_s,
            self._on_lease_replaced,
            config.loop_stall_limit_s,
            serve_through_etcd_outage=broker.replica.config.replication == "sync",
        )
        self._lease_lock = asyncio.Lock()
        self._lease_granted_at = 0.0
        self._publishing = BackgroundLoop(
            "cluster-publish",
            self._publish_once,
            config.publish_interval_s,
            step_first=True,
            on_failure=OnFailure(  # etcd out of reach: the lease loop reports it
                log, "cluster publish failed", quiet=(EtcdUnavailableError,)
            ),
        )
        self._watching_master = BackgroundLoop(
            "cluster-master-watch",
            self._look_at_master,
            0,
            step_first=True,
            on_failure=OnFailure(
                log, "cluster master watch failed", 0.5, quiet=(EtcdUnavailableError,)
            ),
        )
        self._tasks: list[asyncio.Task[None]] = []  # decisions under way (lease lost, sync)
        self._published_sync: SyncState | None = None
        self._fenced = False
        self._announced: tuple[bytes, int] | None = None

    @property
    def name(self) -> str:
        return self.broker.config.broker_name

    @property
    def group(self) -> str:
        return self.config.group

    def me(self) -> BrokerMember:
        """This broker as it announces itself right now."""
        offset = 0
        if self.broker.running:
            offset = self.replica.status().confirmed_offset
        return BrokerMember(
            self.name,
            self.group,
            self.config.http_url,
            self.config.ha_address,
            self.replica.role,
            self.replica.epoch,
            offset,
        )

    # ================================================================== joining

    async def join(self) -> None:
        """Before the broker starts: take a lease, then campaign or find the master to follow.

        A master key still held under this broker's own name is a previous life's (killed
        before its lease lapsed): wait for it to go rather than follow oneself.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.join_timeout_s
        try:
            self._lease_granted_at = time.monotonic()
            self.lease = await self.etcd.grant(self.config.lease_ttl_s)
            while True:
                if self.broker.config.role == "master" and await self._campaign_at_start():
                    return
                kv = await self.etcd.get(self.keys.master(self.group))
                holder = BrokerMember.from_json(kv.value) if kv is not None else None
                if holder is not None and holder.name != self.name:
                    break
                if loop.time() > deadline:
                    raise ClusterJoinError(f"group {self.group} has no master to follow")
                await asyncio.sleep(0.2)
        except EtcdUnavailableError as exc:
            raise ClusterJoinError(f"cannot join cluster {self.config.cluster}: {exc}") from exc
        log.info("broker %s joins group %s as slave of %s", self.name, self.group, holder.name)
        self.replica.prepare_role("slave", _address(holder))

    async def _campaign_at_start(self) -> bool:
        sync_state = SyncState.from_kv(await self.etcd.get(self.keys.sync_state(self.group)))
        if not may_campaign_at_start(self.name, sync_state):
            return False
        seen = await read_epoch(self.etcd, self.keys, self.group)
        local = await asyncio.to_thread(self.replica.local_epoch)
        epoch = max(seen.epoch, local) + 1
        if await campaign(self.etcd, self.keys, self.me(), self.lease, seen, epoch):
            log.info("broker %s elected master of %s at epoch %d", self.name, self.group, epoch)
            self.replica.prepare_role("master", None, epoch)
            return True
        return False

    # ================================================================== running

    def start(self) -> None:
        """Once the broker runs: keep the lease, publish, follow the master key and routes."""
        self.registry.start()
        self.replica.sync_state_listeners.append(self._on_sync_state)
        self.heartbeat.start(self.lease, self._lease_granted_at)
        self.replica.fence_by_lease(self.heartbeat.lease_current)
        self.broker.transactions.survives_failover = self.survives_failover
        self._publishing.start()
        self._watching_master.start()

    async def stop(self) -> None:
        """Leave the cluster: revoking the lease frees the master key for a fast failover.

        Writes are refused first, so nothing is acknowledged here once a successor may be.
        """
        if self.replica.role == "master":
            self.replica.block_writes(NoMasterError(f"broker {self.name} is shutting down"))
        stopped = [self._publishing.stop(), self._watching_master.stop()]
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*stopped, *self._tasks, return_exceptions=True)
        self._tasks.clear()
        await asyncio.to_thread(self.heartbeat.stop)
        await self.registry.stop()
        if self.lease:
            with contextlib.suppress(EtcdUnavailableError):
                await self.etcd.revoke(self.lease)
        await self.etcd.aclose()

    def _on_lease_replaced(self, lease: int) -> None:
        """The heartbeat found the lease gone and took ``lease``: decide here, on the loop."""
        task = asyncio.create_task(self._lease_lost(lease), name="cluster-lease-lost")
        self._tasks.append(task)
        task.add_done_callback(self._forget)

    async def _lease_lost(self, lease: int) -> None:
        """The lease lapsed (etcd out of reach, or the loop stalled, too long): keep or yield.

        Asked again while etcd does not answer (a call on a busy loop can time out): the
        decision must be taken, or a group without slaves is left without a master.
        """
        log.warning("broker %s lost its lease; it now holds lease %x", self.name, lease)
        async with self._lease_lock:
            self.lease = lease
            while self.replica.role == "master":
                try:
                    asked_at = time.monotonic()
                    if await self._keep_or_yield():
                        self.heartbeat.confirmed(asked_at)
                    return
                except EtcdUnavailableError as exc:
                    log.warning("etcd unreachable (%s) after %s lost its lease", exc, self.name)
                    await asyncio.sleep(0.5)
                except Exception:
                    log.exception("cluster lease loss handling failed")
                    return

    async def _keep_or_yield(self) -> bool:
        """Take the master key back on the new lease if no one else was elected (True), else
        give up the role (False)."""
        if await self._holds_master_key():  # an earlier try's answer was lost on the way
            return True
        seen = await read_epoch(self.etcd, self.keys, self.group)
        still_mine = seen.master == self.name and seen.epoch == self.replica.epoch
        if still_mine and await self._reclaim(seen):
            log.info("broker %s kept the master key of %s", self.name, self.group)
            return True
        await self._fence("another broker was elected master while this one was cut off")
        return False

    async def _holds_master_key(self) -> bool:
        kv = await self.etcd.get(self.keys.master(self.group))
        return kv is not None and kv.lease == self.lease and _holder(kv).name == self.name

    async def _reclaim(self, seen: EpochRecord) -> bool:
        result = await self.etcd.txn(
            [
                Compare(self.keys.master(self.group), "CREATE", 0),
                Compare(self.keys.epoch(self.group), "MOD", seen.mod_revision),
            ],
            [put_op(self.keys.master(self.group), self.me().to_json(), self.lease)],
        )
        return result.succeeded

    async def _fence(self, reason: str) -> None:
        if self._fenced:
            return
        self._fenced = True
        message = f"broker {self.name} is no longer master of {self.group}: {reason}"
        log.error("%s; refusing writes", message)
        self.replica.block_writes(NoMasterError(message, None, retry_after_s=2))
        if self.on_fatal is not None:
            self.on_fatal(MasterRoleLostError(message + "; restart it to rejoin as a slave"))

    # ---------------------------------------------------------------- publishing

    async def _publish_once(self) -> None:
        announced = (self.me().to_json(), self.lease)
        if announced != self._announced:  # unchanged: the lease alone keeps the key
            await self.etcd.put(self.keys.broker(self.group, self.name), *announced)
            self._announced = announced
        if self.replica.role != "master" or self._fenced:
            return
        await self.publish_sync_state()
        await self._register_topic_routes()

    def _on_sync_state(self, in_sync: frozenset[str]) -> None:
        """Publish a changed in-sync set at once: who may campaign must not lag behind it."""
        del in_sync
        task = asyncio.create_task(self._publish_sync_now(), name="cluster-sync-state")
        self._tasks.append(task)
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        with contextlib.suppress(ValueError):
            self._tasks.remove(task)

    async def _publish_sync_now(self) -> None:
        try:
            await self.publish_sync_state()
        except EtcdUnavailableError:
            pass  # the publish loop writes it when etcd answers again

    async def publish_sync_state(self) -> None:
        """Write the in-sync set when it differs from what this master last wrote."""
        state = SyncState(self.replica.epoch, self.name, self.replica.sync_state_set())
        if state != self._published_sync:
            await self.etcd.put(self.keys.sync_state(self.group), state.to_json())
            self._published_sync = state

    def survives_failover(self, status: PutStatus) -> bool:
        """Whether a put this master answered ``status`` is in the log of whichever broker is
        master next: PUT_OK (every in-sync slave has it, and only they may campaign), or
        SLAVE_NOT_AVAILABLE while the in-sync set this master last wrote to etcd, in its
        epoch, names no slave (nobody else may campaign). A master cut off from its slave
        and etcd cannot write the smaller set: what it stores alone is not decided."""
        if status is PutStatus.PUT_OK:
            return True
        published = self._published_sync
        return (
            status is PutStatus.SLAVE_NOT_AVAILABLE
            and not self._fenced
            and published is not None
            and published.epoch == self.replica.epoch
            and not published.members
        )

    async def _register_topic_routes(self) -> None:
        for config in self.broker.topics.all():
            topic = config.topic_name
            if topic.startswith("%") or topic in SYSTEM_TOPICS:
                continue
            if topic not in self.registry.view.topics:
                await self.register_topic(topic, config.read_queue_nums)

    async def ensure_topic_route(self, topic: str, queue_count: int) -> None:
        """Register the route of a topic this master has just made, before that is answered,
        so that a route read on any broker right after finds it. When etcd does not answer,
        the publish loop registers it later."""
        if self.replica.accepts_writes and topic not in self.registry.view.topics:
            with contextlib.suppress(EtcdUnavailableError):
                await self.register_topic(topic, queue_count)

    async def register_topic(self, topic: str, queue_count: int) -> None:
        """Give ``topic`` a route over this group when it has none yet."""
        route = spread_queues(topic, queue_count, [self.group])
        key = self.keys.topic(topic)
        await self.etcd.txn([Compare(key, "CREATE", 0)], [put_op(key, route.to_json())])
        await self.registry.refresh()

    # ---------------------------------------------------------------- failover

    async def _look_at_master(self) -> None:
        """React to the master key, then wait until it changes (the watch's step)."""
        key = self.keys.master(self.group)
        kvs, revision = await self.etcd.get_prefix(key)
        master = next((kv for kv in kvs if kv.key == key), None)
        changed = await self._on_master(master)
        if changed or master is None:
            return  # look again at once: an election is under way
        async for _ in self.etcd.watch_prefix(key, revision + 1):
            break

    async def _on_master(self, kv: KeyValue | None) -> bool:
        """React to the master key's current value; True when this broker changed role."""
        if kv is None:
            if self.replica.role == "master":
                await asyncio.sleep(0.2)  # the lease loop decides what a master does
                return False
            return await self._elect()
        holder = _holder(kv)
        if holder.name == self.name:
            if self.replica.role != "master" and kv.lease == self.lease:
                return await self._won_unanswered(holder)
            return False
        if self.replica.role == "master":
            await self._fence(f"{holder.name} holds the master key")
            await asyncio.sleep(1)
            return False
        await self._follow(holder)
        return False

    async def _follow(self, holder: BrokerMember) -> None:
        self.replica.allow_writes()  # a slave answers 421 again, naming the master
        current = self.replica.master_address
        address = _address(holder)
        if current == address:
            return
        log.info("broker %s follows the new master %s", self.name, holder.name)
        try:
            await self.replica.follow(address)
        except ReplicaDivergedError as exc:
            log.error("cannot follow %s: %s", holder.name, exc)
            if self.on_fatal is not None:
                self.on_fatal(exc)

    async def _elect(self) -> bool:
        """The group has no master: campaign when this broker may and it is its turn."""
        self.replica.block_writes(NoMasterError(f"group {self.group} is electing a master"))
        sync_state = SyncState.from_kv(await self.etcd.get(self.keys.sync_state(self.group)))
        if not may_campaign(self.name, sync_state):
            await asyncio.sleep(0.3)
            return False
        kvs, _ = await self.etcd.get_prefix(self.keys.brokers_prefix(self.group))
        members = [BrokerMember.from_json(kv.value) for kv in kvs]
        me = self.me()
        members = [m for m in members if m.name != self.name and m.role != "master"] + [me]
        first = first_candidate(members, sync_state)
        if first is not None and first.name != self.name:
            await asyncio.sleep(self.config.campaign_grace_s)
            if await self.etcd.get(self.keys.master(self.group)) is not None:
                return False
        seen = await read_epoch(self.etcd, self.keys, self.group)
        epoch = max(seen.epoch, self.replica.epoch) + 1
        if not await campaign(self.etcd, self.keys, me, self.lease, seen, epoch):
            return False
        await self._take_over(epoch)
        return True

    async def _won_unanswered(self, holder: BrokerMember) -> bool:
        """This slave holds the master key under its own lease: only its campaign puts that,
        so the campaign won and its answer was lost (a call timed out on a busy loop)."""
        log.warning(
            "broker %s won the election of %s unanswered; taking over", self.name, self.group
        )
        await self._take_over(holder.epoch)
        return True

    async def _take_over(self, epoch: int) -> None:
        try:
            await self.replica.promote(epoch)
        except Exception:
            log.exception("promotion to epoch %d failed; giving the master key up", epoch)
            with contextlib.suppress(EtcdUnavailableError):
                await self.etcd.delete(self.keys.master(self.group))
            return
        # Its in-sync set first (no slave yet): what it then stores alone survives a failover
        # (survives_failover), since no other broker may campaign. Etcd out of reach: the
        # publish loop writes it later, and until then its transaction ends wait for it.
        with contextlib.suppress(EtcdUnavailableError):
            await self.publish_sync_state()
        self.replica.allow_writes()
        log.info("broker %s is master of %s at epoch %d", self.name, self.group, epoch)
        await republish_master(self.etcd, self.keys, self.me(), self.lease)
        await self.publish_sync_state()


def _holder(kv: KeyValue) -> BrokerMember:
    return BrokerMember.from_json(kv.value)


def _address(member: BrokerMember) -> MasterAddress:
    return MasterAddress(member.name, member.http_url, member.ha_address)

"""``min_in_sync_replicas``: a master with too few replicas in sync refuses puts before it
appends; a put admitted before the set shrank waits for its slave acknowledgement.

The master is a real broker with its HA port; its slaves are driven by hand over real TCP
connections (:class:`tests.services.test_ha_master.FakeSlave`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, OutgoingMessage, PullOptions
from services.ha.replication import NotEnoughInSyncReplicasError
from services.ha.role import ReplicaConfig
from storage import StoreNotWriteableError
from tests.services.conftest import SMALL, until, wait_for
from tests.services.test_ha_master import FakeSlave, make_broker, send

SLAVE_TIMEOUT_MS = 400


async def two_of_two(tmp_path: Path) -> Broker:
    """A sync master that needs itself and one slave in sync (a group of two, N=2)."""
    store = dataclasses.replace(SMALL, sync_flush_timeout_ms=SLAVE_TIMEOUT_MS)
    return await make_broker(tmp_path, replication="sync", min_in_sync_replicas=2, store=store)


def end_offset(broker: Broker) -> int:
    return broker.replica.status().max_physical_offset


async def in_sync_slave(broker: Broker, name: str = "s1") -> FakeSlave:
    """A slave that has everything and says so: in the sync-state set."""
    end = end_offset(broker)
    slave = await FakeSlave.connect(broker, name, end)
    await wait_for(lambda: broker.replica.sync_state_set() == frozenset({name}))
    return slave


async def acked_send(broker: Broker, slave: FakeSlave, body: bytes) -> list[str]:
    """A send the slave reads and acks as soon as the master has appended it."""
    before = end_offset(broker)
    put = asyncio.create_task(send(broker, body))
    await until(lambda: end_offset(broker) > before)
    end = end_offset(broker)
    await slave.read_until(end)
    await slave.ack(end)
    return await asyncio.wait_for(put, 10)


def test_the_setting_counts_the_master_and_needs_sync_replication(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        ReplicaConfig(min_in_sync_replicas=0)
    with pytest.raises(ValueError, match="sync replication"):
        ReplicaConfig(min_in_sync_replicas=2, ha_listen="127.0.0.1:0")
    with pytest.raises(ValueError, match="HA port"):
        ReplicaConfig(min_in_sync_replicas=2, replication="sync")
    config = BrokerConfig(
        tmp_path, replication="sync", ha_listen="127.0.0.1:0", min_in_sync_replicas=2
    )
    assert config.min_in_sync_replicas == 2


async def test_alone_a_master_refuses_writes_and_stores_nothing(tmp_path: Path) -> None:
    broker = await two_of_two(tmp_path)
    try:
        status = broker.replica.status()
        assert (status.in_sync_replicas, status.min_in_sync_replicas) == (1, 2)
        before = end_offset(broker)
        with pytest.raises(NotEnoughInSyncReplicasError, match="1 of the 2") as refused:
            await send(broker, b"alone")
        assert isinstance(refused.value, StoreNotWriteableError)  # a refusal of the store's kind
        assert refused.value.code == "NOT_ENOUGH_IN_SYNC_REPLICAS"
        assert end_offset(broker) == before

        slave = await in_sync_slave(broker)
        assert broker.replica.status().in_sync_replicas == 2
        assert await acked_send(broker, slave, b"replicated") == ["PUT_OK"]

        await slave.close()  # the slave goes: writes stop again
        await wait_for(lambda: broker.replica.in_sync_replicas() == 1)
        before = end_offset(broker)
        with pytest.raises(NotEnoughInSyncReplicasError):
            await broker.send.send("HaT", [OutgoingMessage(b"a", queue_id=0)] * 3)
        assert end_offset(broker) == before
    finally:
        await broker.stop()


async def test_timer_sends_and_half_messages_are_refused_alike(tmp_path: Path) -> None:
    broker = await two_of_two(tmp_path)
    try:
        before = end_offset(broker)
        timed = OutgoingMessage(b"later", queue_id=0, deliver_after_ms=60_000)
        with pytest.raises(NotEnoughInSyncReplicasError):
            await broker.send.send("HaT", [timed])
        with pytest.raises(NotEnoughInSyncReplicasError):
            await broker.transactions.prepare("HaT", OutgoingMessage(b"half"), "producers")
        assert end_offset(broker) == before
    finally:
        await broker.stop()


async def test_a_put_admitted_before_the_set_shrank_is_never_acknowledged_alone(
    tmp_path: Path,
) -> None:
    broker = await two_of_two(tmp_path)
    try:
        slave = await in_sync_slave(broker)
        before = end_offset(broker)
        put = asyncio.create_task(send(broker, b"in flight"))
        await until(lambda: end_offset(broker) > before)  # admitted and appended
        await slave.close()  # the slave leaves before it acks
        await wait_for(lambda: not broker.replica.sync_state_set())
        # Stored on the master, not confirmed on a second replica: not PUT_OK, not refused.
        assert await asyncio.wait_for(put, 10) == ["FLUSH_SLAVE_TIMEOUT"]
        pulled = await broker.pull.pull_queue("HaT", 0, 0, PullOptions())
        assert pulled.max_offset == 1
    finally:
        await broker.stop()


async def test_the_slaves_left_in_sync_must_still_number_enough(tmp_path: Path) -> None:
    """N=3: one of two slaves leaves while a put waits; the other's ack alone is not enough."""
    store = dataclasses.replace(SMALL, sync_flush_timeout_ms=SLAVE_TIMEOUT_MS)
    broker = await make_broker(tmp_path, replication="sync", min_in_sync_replicas=3, store=store)
    try:
        end = end_offset(broker)
        stays = await FakeSlave.connect(broker, "s1", end)
        leaves = await FakeSlave.connect(broker, "s2", end)
        await wait_for(lambda: broker.replica.in_sync_replicas() == 3)
        before = end_offset(broker)
        put = asyncio.create_task(send(broker, b"in flight"))
        await until(lambda: end_offset(broker) > before)
        await leaves.close()
        await wait_for(lambda: broker.replica.sync_state_set() == frozenset({"s1"}))
        end = end_offset(broker)
        await stays.read_until(end)
        await stays.ack(end)
        assert await asyncio.wait_for(put, 10) == ["FLUSH_SLAVE_TIMEOUT"]
        with pytest.raises(NotEnoughInSyncReplicasError, match="2 of the 3"):
            await send(broker, b"refused")
        await stays.close()
    finally:
        await broker.stop()


async def test_a_slave_back_in_sync_confirms_a_put_waiting_for_it(tmp_path: Path) -> None:
    store = dataclasses.replace(SMALL, sync_flush_timeout_ms=30_000)
    broker = await make_broker(tmp_path, replication="sync", min_in_sync_replicas=2, store=store)
    try:
        first = await in_sync_slave(broker)
        before = end_offset(broker)
        put = asyncio.create_task(send(broker, b"in flight"))
        await until(lambda: end_offset(broker) > before)
        await first.close()
        await wait_for(lambda: not broker.replica.sync_state_set())
        assert not put.done()
        # The slave comes back with everything (it had read it before it went): in sync again,
        # and its report covers the put.
        again = await in_sync_slave(broker)
        assert await asyncio.wait_for(put, 10) == ["PUT_OK"]
        await again.close()
    finally:
        await broker.stop()


async def test_one_replica_is_todays_behaviour(tmp_path: Path) -> None:
    store = dataclasses.replace(SMALL, sync_flush_timeout_ms=SLAVE_TIMEOUT_MS)
    broker = await make_broker(tmp_path, replication="sync", store=store)
    try:
        status = broker.replica.status()
        assert (status.in_sync_replicas, status.min_in_sync_replicas) == (1, 1)
        assert await send(broker, b"alone") == ["SLAVE_NOT_AVAILABLE"]  # stored all the same
    finally:
        await broker.stop()

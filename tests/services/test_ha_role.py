"""The replica role on real stores: its config, the role before start, the write fence,
promotion of a slave and following another master (the masters here never answer, so the
role changes run without a stream: that part is tests/services/test_ha_master.py's and the
failover tests')."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, OutgoingMessage
from services.errors import BrokerUnavailableError, NoMasterError, NotMasterError
from services.ha import MasterAddress, ReplicaConfig, ReplicaRole
from tests.services.conftest import SMALL

GONE = MasterAddress("m", "http://127.0.0.1:1", "127.0.0.1:1")
"""A master that never answers (port 1 refuses)."""


@pytest.fixture
async def slave(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(
        BrokerConfig(tmp_path / "slave", SMALL, broker_name="s", role="slave", master=GONE)
    )
    await broker.start()
    yield broker
    await broker.stop()


@pytest.fixture
async def master(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(tmp_path / "master", SMALL, broker_name="m"))
    await broker.start()
    yield broker
    await broker.stop()


async def send(broker: Broker, body: bytes) -> str:
    [receipt] = await broker.send.send("RoleT", [OutgoingMessage(body, queue_id=0)])
    return receipt.status


def test_a_slave_needs_a_master_unless_its_cluster_elects_one() -> None:
    with pytest.raises(ValueError):
        ReplicaConfig(role="slave")
    assert ReplicaConfig(role="slave", cluster_managed=True).master is None


def test_the_role_is_prepared_before_the_store_opens(tmp_path: Path) -> None:
    role = ReplicaRole(ReplicaConfig(cluster_managed=True), tmp_path, {}, 1.0)
    role.prepare_role("slave", GONE)
    assert (role.role, role.master_address) == ("slave", GONE)
    role.prepare_role("master", None, epoch=7)
    assert (role.role, role.master_address) == ("master", None)
    with pytest.raises(ValueError):
        role.prepare_role("slave", None)
    assert role.local_epoch() == 0  # no epoch file yet


async def test_prepare_role_is_refused_once_the_broker_opened(master: Broker) -> None:
    with pytest.raises(RuntimeError):
        master.replica.prepare_role("slave", GONE)


async def test_a_role_not_started_refuses_status_and_changes(tmp_path: Path) -> None:
    role = ReplicaRole(ReplicaConfig(), tmp_path, {}, 1.0)
    with pytest.raises(BrokerUnavailableError):
        role.status()
    with pytest.raises(BrokerUnavailableError):
        await role.promote(1)
    with pytest.raises(BrokerUnavailableError):
        await role.follow(GONE)


async def test_a_new_master_records_the_next_epoch_at_its_log_end(master: Broker) -> None:
    assert master.replica.epoch == 1
    [entry] = master.replica.epoch_entries()
    assert (entry.epoch, entry.start_offset) == (1, 0)
    assert master.replica.ha_address is None  # no HA port asked for


async def test_the_write_fence(master: Broker) -> None:
    assert master.replica.accepts_writes
    fence = NoMasterError("group g is electing a master")
    master.replica.block_writes(fence)
    assert not master.replica.accepts_writes
    with pytest.raises(NoMasterError) as refused:
        master.replica.check_writable()
    assert refused.value is fence
    master.replica.allow_writes()
    master.replica.check_writable()
    assert await send(master, b"after the fence") == "PUT_OK"


async def test_the_lease_fence(master: Broker) -> None:
    current = [True]
    master.replica.fence_by_lease(lambda: current[0])
    master.replica.check_writable()
    current[0] = False
    assert not master.replica.accepts_writes
    with pytest.raises(NoMasterError, match="has not confirmed its master lease"):
        master.replica.check_writable()
    current[0] = True
    assert master.replica.accepts_writes
    master.replica.check_writable()


async def test_a_slave_names_its_master_when_written_to(slave: Broker) -> None:
    assert not slave.replica.accepts_writes
    with pytest.raises(NotMasterError) as refused:
        slave.replica.check_writable()
    assert refused.value.master == GONE.http_url
    status = slave.replica.status()
    assert (status.role, status.master, status.connected) == ("slave", GONE, False)


async def test_a_promoted_slave_takes_writes_at_its_new_epoch(slave: Broker) -> None:
    end = slave.replica.status().max_physical_offset
    await slave.replica.promote(4)
    assert (slave.replica.role, slave.replica.epoch, slave.replica.master_address) == (
        "master",
        4,
        None,
    )
    assert slave.replica.epoch_entries()[-1].start_offset == end
    slave.replica.check_writable()
    assert await send(slave, b"first write of epoch 4") == "PUT_OK"


async def test_a_slave_follows_another_master(slave: Broker) -> None:
    other = MasterAddress("m2", "http://127.0.0.1:2", "127.0.0.1:2")
    await slave.replica.follow(other)  # not reachable yet: replication retries
    assert slave.replica.master_address == other
    assert slave.replica.status().master == other
    with pytest.raises(NotMasterError) as refused:
        slave.replica.check_writable()
    assert refused.value.master == other.http_url


async def test_a_stopped_broker_changes_no_role(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(tmp_path / "s", SMALL, role="slave", master=GONE))
    await broker.start()
    await broker.stop()
    with pytest.raises(BrokerUnavailableError):
        await broker.replica.promote(2)


async def test_the_config_snapshot_holds_what_a_slave_copies(master: Broker) -> None:
    await send(master, b"makes a topic")
    snapshot = master.replica.config_snapshot()
    assert list(snapshot) == [
        "topics",
        "subscription_groups",
        "consumer_offsets",
        "delay_offsets",
        "pop_state",
        "pop_secret",
        "timer_progress",
    ]
    assert "RoleT" in str(snapshot["topics"])
    assert isinstance(snapshot["pop_secret"], str) and snapshot["pop_secret"]
    progress = snapshot["timer_progress"]
    assert isinstance(progress, dict) and set(progress) == {"read_time_ms", "commit_offset"}

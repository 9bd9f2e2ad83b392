"""The lease heartbeat against a real etcd: a broker whose event loop is busy keeps its master
key; a broker whose loop is stuck loses it; with etcd out of reach an async master stops
taking writes, a sync one keeps serving."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import pytest

from services import Broker, BrokerConfig
from services.cluster.election import campaign, read_epoch
from services.cluster.etcd import EtcdClient, KeyValue
from services.cluster.member import ClusterConfig, ClusterMember
from services.cluster.route_table import BrokerMember, ClusterKeys
from services.errors import MasterRoleLostError, NoMasterError
from tests.etcd_support import EtcdServer
from tests.services.conftest import SMALL, wait_for

TTL_S = 2
FATAL: list[BaseException] = []


@pytest.fixture
async def master(tmp_path: Path, etcd: EtcdServer) -> AsyncIterator[ClusterMember]:
    """A broker elected master of group g1 (no slaves, async replication), its member
    running."""
    async with running_master(tmp_path, etcd, "async") as member:
        yield member


@asynccontextmanager
async def running_master(
    tmp_path: Path, etcd: EtcdServer, replication: Literal["async", "sync"]
) -> AsyncIterator[ClusterMember]:
    broker = Broker(
        BrokerConfig(
            tmp_path / "store",
            SMALL,
            broker_name="g1-a",
            ha_listen="127.0.0.1:0",
            cluster_managed=True,
            replication=replication,
        )
    )
    config = ClusterConfig("c1", "g1", [etcd.url], "http://127.0.0.1:1", "127.0.0.1:2", TTL_S)
    member = ClusterMember(broker, config, FATAL.append)
    await member.join()
    await broker.start()
    member.start()
    FATAL.clear()
    try:
        yield member
    finally:
        await member.stop()
        await broker.stop()


async def master_key(etcd: EtcdServer) -> KeyValue | None:
    client = EtcdClient([etcd.url])
    try:
        return await client.get(ClusterKeys("c1").master("g1"))
    finally:
        await client.aclose()


async def burn(slice_s: float, until: float) -> None:
    """Stay ready: burn the CPU in short slices, yielding to the loop between them."""
    while time.monotonic() < until:
        end = time.perf_counter() + slice_s
        while time.perf_counter() < end:
            pass
        await asyncio.sleep(0)


async def test_a_busy_loop_keeps_the_master_key(master: ClusterMember, etcd: EtcdServer) -> None:
    before = await master_key(etcd)
    assert before is not None and before.lease == master.lease
    # 30 ready tasks of 10 ms each: every turn of the loop takes ~0.3 s, for 3 TTLs; an HTTP
    # call made on the loop needs several turns.
    until = time.monotonic() + 3 * TTL_S
    await asyncio.gather(*(burn(0.01, until) for _ in range(30)))
    after = await master_key(etcd)
    assert after is not None
    assert after.create_revision == before.create_revision  # never lapsed and taken again
    assert after.lease == before.lease == master.lease
    assert master.replica.role == "master" and master.replica.accepts_writes


def elsewhere(coro: Coroutine[None, None, object]) -> object:
    """Run ``coro`` on a loop of its own in another thread (this test's loop is stuck)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def take_over(etcd: EtcdServer) -> bool:
    """What a slave g1-b does once the master key is gone: campaign for the next epoch."""
    client = EtcdClient([etcd.url])
    keys = ClusterKeys("c1")
    try:
        me = BrokerMember("g1-b", "g1", "http://127.0.0.1:3", "127.0.0.1:4", "slave", 1, 0)
        seen = await read_epoch(client, keys, "g1")
        return await campaign(client, keys, me, await client.grant(30), seen, seen.epoch + 1)
    finally:
        await client.aclose()


def stall_until_the_master_key_goes(etcd: EtcdServer, within_s: float) -> bool:
    """Block the loop (no await) until the master key is gone, for at most ``within_s``."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if elsewhere(master_key(etcd)) is None:
            return True
        time.sleep(0.1)
    return False


async def test_a_stuck_loop_loses_the_master_key_and_the_loop_yields_it(
    master: ClusterMember, etcd: EtcdServer
) -> None:
    before = await master_key(etcd)
    assert before is not None and master.replica.accepts_writes
    assert stall_until_the_master_key_goes(etcd, within_s=6 * TTL_S)
    assert elsewhere(take_over(etcd))  # a slave is elected while this loop is stuck
    # Before the loop learns any of it, the requests queued behind the stall are refused: the
    # lease has not been confirmed within its TTL.
    assert not master.replica.accepts_writes
    with pytest.raises(NoMasterError, match="has not confirmed its master lease"):
        master.replica.check_writable()
    # The loop runs again: it yields (seen by its watch or on the lease's loss, whichever is
    # first), and the heartbeat hands it a new lease for its membership.
    await wait_for(lambda: not master.replica.accepts_writes and master.lease != before.lease)
    assert [type(exc) for exc in FATAL] == [MasterRoleLostError]
    holder = await master_key(etcd)
    assert holder is not None and BrokerMember.from_json(holder.value).name == "g1-b"


async def test_a_loop_stuck_past_the_ttl_takes_its_key_back_when_nobody_else_did(
    master: ClusterMember, etcd: EtcdServer
) -> None:
    before = await master_key(etcd)
    assert before is not None
    assert stall_until_the_master_key_goes(etcd, within_s=6 * TTL_S)

    def key_held_again() -> bool:
        kv = elsewhere(master_key(etcd))
        return isinstance(kv, KeyValue) and kv.lease == master.lease

    # Writes are refused until the loop has the key back (the old lease was not confirmed
    # within its TTL); then taken again.
    await wait_for(lambda: key_held_again() and master.replica.accepts_writes)
    assert master.lease != before.lease and not FATAL


async def test_with_etcd_away_an_async_master_stops_taking_writes_until_it_answers_again(
    master: ClusterMember, etcd: EtcdServer
) -> None:
    """Cut off from etcd the master cannot tell whether a slave was elected in its place:
    it refuses writes once its lease may have lapsed (the partition tests measure when)."""
    assert master.replica.accepts_writes
    etcd.stop()
    await wait_for(lambda: not master.replica.accepts_writes, within=6 * TTL_S)
    with pytest.raises(NoMasterError, match="has not confirmed its master lease"):
        master.replica.check_writable()
    etcd.start()  # the lease lapsed meanwhile; nobody else was elected: the key is taken back
    await wait_for(lambda: master.replica.accepts_writes, within=10 * TTL_S)
    holder = await master_key(etcd)
    assert holder is not None and holder.lease == master.lease and not FATAL


async def test_with_etcd_away_a_sync_master_keeps_serving(tmp_path: Path, etcd: EtcdServer) -> None:
    """A sync master's PUT_OK needs a slave's ack, which a promoted slave no longer gives."""
    async with running_master(tmp_path, etcd, "sync") as member:
        etcd.stop()
        until = time.monotonic() + 2 * TTL_S
        while time.monotonic() < until:
            assert member.replica.accepts_writes
            await asyncio.sleep(0.1)
        etcd.start()

"""A broker's membership against a real etcd, in process: what a member does when etcd's
answers to it are lost (the calls of a busy event loop time out). Failover with brokers in
processes of their own: tests/app/test_cluster.py, tests/app/test_cluster_failover.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, OutgoingMessage
from services.cluster.etcd import Compare, EtcdClient, put_op
from services.cluster.member import ClusterConfig, ClusterMember
from services.cluster.route_table import BrokerMember, ClusterKeys
from storage import PutStatus
from tests.etcd_support import EtcdServer
from tests.net import free_port
from tests.services.conftest import SMALL, wait_for

KEYS = ClusterKeys("c1")


def dead_master() -> BrokerMember:
    """A master nobody answers for (its process is gone; its lease not yet lapsed)."""
    return BrokerMember(
        "g1-x", "g1", f"http://127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}", "master", 1, 0
    )


@pytest.fixture
async def slave(tmp_path: Path, etcd: EtcdServer) -> AsyncIterator[ClusterMember]:
    """Broker g1-a, joined as the slave of g1-x."""
    client = EtcdClient([etcd.url])
    try:
        lease = await client.grant(60)
        await client.put(KEYS.master("g1"), dead_master().to_json(), lease)
        await client.put(KEYS.epoch("g1"), b'{"epoch": 1, "master": "g1-x"}')
    finally:
        await client.aclose()
    config = BrokerConfig(
        tmp_path / "store",
        SMALL,
        role="slave",
        broker_name="g1-a",
        ha_listen="127.0.0.1:0",
        cluster_managed=True,
        truncate_on_divergence=False,
    )
    broker = Broker(config)
    cluster = ClusterConfig("c1", "g1", [etcd.url], "http://127.0.0.1:1", "127.0.0.1:2", 2)
    member = ClusterMember(broker, cluster)
    await member.join()
    await broker.start()
    member.start()
    try:
        yield member
    finally:
        await member.stop()
        await broker.stop()


async def test_a_campaign_won_without_an_answer_still_makes_the_slave_master(
    slave: ClusterMember, etcd: EtcdServer
) -> None:
    assert slave.replica.role == "slave"
    me = slave.me()
    leader = BrokerMember(me.name, "g1", me.http_url, me.ha_address, "master", 2, 0)
    record = json.dumps({"epoch": 2, "master": me.name, "start_offset": 0}).encode()
    client = EtcdClient([etcd.url])
    try:  # what g1-a's own campaign wrote, with the dead master's key gone
        await client.delete(KEYS.master("g1"))
        result = await client.txn(
            [Compare(KEYS.master("g1"), "CREATE", 0)],
            [
                put_op(KEYS.master("g1"), leader.to_json(), slave.lease),
                put_op(KEYS.epoch("g1"), record),
            ],
        )
        assert result.succeeded
        await wait_for(lambda: slave.replica.role == "master" and slave.replica.accepts_writes)
        assert slave.replica.epoch == 2
        kv = await client.get(KEYS.master("g1"))
        assert kv is not None and BrokerMember.from_json(kv.value).name == "g1-a"
    finally:
        await client.aclose()


async def test_a_lone_sync_master_decides_what_it_stores_once_etcd_knows_it_is_alone(
    tmp_path: Path, etcd: EtcdServer
) -> None:
    """Its in-sync set, written to etcd, names no slave: no other broker may campaign, so a
    put it alone holds (SLAVE_NOT_AVAILABLE) survives a failover, and transactions end."""
    config = BrokerConfig(
        tmp_path / "store",
        SMALL,
        role="master",
        broker_name="g1-a",
        ha_listen="127.0.0.1:0",
        replication="sync",
        cluster_managed=True,
    )
    broker = Broker(config)
    cluster = ClusterConfig("c1", "g1", [etcd.url], "http://127.0.0.1:1", "127.0.0.1:2", 2)
    member = ClusterMember(broker, cluster)
    await member.join()
    await broker.start()
    member.start()
    client = EtcdClient([etcd.url])
    try:
        assert not member.survives_failover(PutStatus.SLAVE_NOT_AVAILABLE)  # nothing written
        published: list[bytes] = []

        async def read_sync_state() -> None:
            kv = await client.get(KEYS.sync_state("g1"))
            published[:] = [] if kv is None else [kv.value]

        for _ in range(200):  # the publish loop writes it within a turn or two
            await read_sync_state()
            if published:
                break
            await asyncio.sleep(0.05)
        assert published, "the in-sync set was never written"
        assert json.loads(published[0])["members"] == []
        assert member.survives_failover(PutStatus.SLAVE_NOT_AVAILABLE)
        assert member.survives_failover(PutStatus.PUT_OK)
        assert not member.survives_failover(PutStatus.FLUSH_SLAVE_TIMEOUT)

        service = broker.transactions
        prepared = await service.prepare("Orders", OutgoingMessage(b"x"), "pg")
        ended = await service.end(prepared.transaction.transaction_id, "pg", commit=True)
        assert not ended.repeated and not ended.transaction.undecided
    finally:
        await client.aclose()
        await member.stop()
        await broker.stop()

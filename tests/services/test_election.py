"""The election's rules (who may campaign, in which order) and its txn against a real etcd."""

from __future__ import annotations

import asyncio

from services.cluster.election import (
    EpochRecord,
    SyncState,
    campaign,
    campaign_order,
    first_candidate,
    may_campaign,
    may_campaign_at_start,
    read_epoch,
    republish_master,
)
from services.cluster.etcd import EtcdClient
from services.cluster.route_table import BrokerMember, ClusterKeys
from tests.etcd_support import EtcdServer

KEYS = ClusterKeys("unit")


def member(name: str, offset: int, role: str = "slave") -> BrokerMember:
    return BrokerMember(name, "g", f"http://{name}", f"{name}:1", role, 1, offset)


def test_only_sync_state_members_may_campaign() -> None:
    state = SyncState(3, "a", frozenset({"b"}))
    assert may_campaign("b", state)
    assert not may_campaign("c", state)
    assert not may_campaign("b", None)  # never published: nobody knows who is complete


def test_at_start_a_stale_replica_may_not_take_a_free_master_key() -> None:
    state = SyncState(3, "a", frozenset({"b"}))
    assert may_campaign_at_start("a", state)  # the last master holds every acked message
    assert may_campaign_at_start("b", state)
    assert not may_campaign_at_start("c", state)  # fell behind: it would make b truncate
    assert may_campaign_at_start("c", None)  # a new group: the first master starts it


def test_highest_confirmed_offset_first_then_name() -> None:
    order = campaign_order([member("c", 10), member("b", 10), member("d", 30)])
    assert [m.name for m in order] == ["d", "b", "c"]
    state = SyncState(1, "a", frozenset({"b", "c"}))
    first = first_candidate([member("d", 99), member("c", 5), member("b", 5)], state)
    assert first is not None and first.name == "b"  # d is ahead but was not in sync
    assert first_candidate([member("d", 99)], state) is None


def test_one_winner_per_epoch_and_the_epoch_moves_in_the_same_txn(etcd: EtcdServer) -> None:
    async def run() -> None:
        client = EtcdClient([etcd.url])
        try:
            lease_b, lease_c = await client.grant(5), await client.grant(5)
            seen = await read_epoch(client, KEYS, "g")
            assert seen == EpochRecord(0, "", 0)
            won = await asyncio.gather(
                campaign(client, KEYS, member("b", 1), lease_b, seen, 1),
                campaign(client, KEYS, member("c", 1), lease_c, seen, 1),
            )
            assert sorted(won) == [False, True]
            winner = "b" if won[0] else "c"
            record = await read_epoch(client, KEYS, "g")
            assert (record.epoch, record.master) == (1, winner)
            master = await client.get(KEYS.master("g"))
            assert master is not None
            assert BrokerMember.from_json(master.value).role == "master"
            # The winner's lease ends: the key goes, but a stale epoch read cannot win again.
            await client.revoke(lease_b if winner == "b" else lease_c)
            assert await client.get(KEYS.master("g")) is None
            loser_lease = lease_c if winner == "b" else lease_b
            assert not await campaign(client, KEYS, member("x", 1), loser_lease, seen, 2)
            assert await campaign(client, KEYS, member("x", 1), loser_lease, record, 2)
            refreshed = member("x", 77, "master")
            assert await republish_master(client, KEYS, refreshed, loser_lease)
            assert not await republish_master(client, KEYS, refreshed, lease_b + lease_c)
            current = await client.get(KEYS.master("g"))
            assert current is not None
            assert BrokerMember.from_json(current.value).confirmed_offset == 77
        finally:
            await client.aclose()

    asyncio.run(run())

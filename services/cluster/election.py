"""A broker group's master election in etcd (RocketMQ 5's controller mode, on etcd).

The master holds ``groups/<g>/master``, attached to its lease: when it dies the lease lapses
and the key goes. A campaign is one txn — the master key must not exist and the epoch key
must be unchanged since it was read (its ``mod_revision``) — that puts the master key and the
next epoch together, so two candidates can never both win the same epoch.

Who may campaign after a master is lost: only members of the last published sync-state set
(they hold every acknowledged message); the one with the highest confirmed offset goes first
(ties: the smaller name), the others wait a grace period and re-check.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from services.cluster.etcd import Compare, EtcdClient, KeyValue, put_op
from services.cluster.route_table import BrokerMember, ClusterKeys


@dataclass(frozen=True, slots=True)
class EpochRecord:
    """The group's epoch counter as read from etcd (``mod_revision`` 0: never written)."""

    epoch: int
    master: str
    mod_revision: int

    @classmethod
    def from_kv(cls, kv: KeyValue | None) -> EpochRecord:
        if kv is None:
            return cls(0, "", 0)
        data = kv.json()
        return cls(int(data.get("epoch", 0)), str(data.get("master", "")), kv.mod_revision)


@dataclass(frozen=True, slots=True)
class SyncState:
    """The in-sync replicas a master last published."""

    epoch: int
    master: str
    members: frozenset[str]

    def to_json(self) -> bytes:
        body = {"epoch": self.epoch, "master": self.master, "members": sorted(self.members)}
        return json.dumps(body, sort_keys=True).encode()

    @classmethod
    def from_kv(cls, kv: KeyValue | None) -> SyncState | None:
        if kv is None:
            return None
        data = kv.json()
        return cls(
            int(data.get("epoch", 0)), str(data.get("master", "")), frozenset(data["members"])
        )


def may_campaign(name: str, sync_state: SyncState | None) -> bool:
    """Only a replica the last master counted as in sync holds every acknowledged message."""
    return sync_state is not None and name in sync_state.members


def may_campaign_at_start(name: str, sync_state: SyncState | None) -> bool:
    """A broker starting up may take a free master key if the group never published an
    in-sync set, or it was the last master or in that master's in-sync set — never a stale
    replica that could make the complete ones truncate to it."""
    return sync_state is None or name == sync_state.master or name in sync_state.members


def campaign_order(candidates: Iterable[BrokerMember]) -> list[BrokerMember]:
    """Who goes first: the highest confirmed offset, ties broken by name."""
    return sorted(candidates, key=lambda m: (-m.confirmed_offset, m.name))


def first_candidate(
    members: Iterable[BrokerMember], sync_state: SyncState | None
) -> BrokerMember | None:
    """The live, eligible replica that should campaign first (None: nobody may)."""
    eligible = [m for m in members if may_campaign(m.name, sync_state)]
    ordered = campaign_order(eligible)
    return ordered[0] if ordered else None


async def read_epoch(etcd: EtcdClient, keys: ClusterKeys, group: str) -> EpochRecord:
    return EpochRecord.from_kv(await etcd.get(keys.epoch(group)))


async def campaign(
    etcd: EtcdClient,
    keys: ClusterKeys,
    me: BrokerMember,
    lease: int,
    seen: EpochRecord,
    epoch: int,
) -> bool:
    """Take the master key with ``epoch`` if nobody holds it and the epoch is still ``seen``."""
    record = {"epoch": epoch, "master": me.name, "start_offset": me.confirmed_offset}
    leader = BrokerMember(
        me.name, me.group, me.http_url, me.ha_address, "master", epoch, me.confirmed_offset
    )
    result = await etcd.txn(
        [
            Compare(keys.master(me.group), "CREATE", 0),
            Compare(keys.epoch(me.group), "MOD", seen.mod_revision),
        ],
        [
            put_op(keys.master(me.group), leader.to_json(), lease),
            put_op(keys.epoch(me.group), json.dumps(record, sort_keys=True).encode()),
        ],
    )
    return result.succeeded


async def republish_master(
    etcd: EtcdClient, keys: ClusterKeys, me: BrokerMember, lease: int
) -> bool:
    """Refresh the master key's value while this broker still holds it (under ``lease``)."""
    current = await etcd.get(keys.master(me.group))
    if current is None or current.lease != lease:
        return False
    result = await etcd.txn(
        [Compare(keys.master(me.group), "CREATE", current.create_revision)],
        [put_op(keys.master(me.group), me.to_json(), lease)],
    )
    return result.succeeded

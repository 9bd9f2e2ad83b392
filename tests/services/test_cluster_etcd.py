"""The etcd client and the route table against a real etcd server."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from services.cluster import (
    BrokerMember,
    ClusterKeys,
    ClusterView,
    EtcdClient,
    EtcdUnavailableError,
    RouteRegistry,
    spread_queues,
)
from services.cluster.etcd import Compare, EtcdLeaseClient, put_op, range_op
from services.tls import TlsConfig
from tests.etcd_support import EtcdServer, start_etcd
from tests.net import free_port
from tests.tls_support import make_certificates


def test_put_get_prefix_and_delete(etcd: EtcdServer) -> None:
    async def run() -> None:
        client = EtcdClient([etcd.url])
        try:
            await client.put("/a/1", b"one")
            await client.put("/a/2", b"two")
            await client.put("/b/1", b"other")
            assert (await client.get("/a/1")).value == b"one"  # type: ignore[union-attr]
            kvs, revision = await client.get_prefix("/a/")
            assert [(kv.key, kv.value) for kv in kvs] == [("/a/1", b"one"), ("/a/2", b"two")]
            assert revision >= 3
            assert await client.delete("/a/1") == 1
            assert await client.get("/a/1") is None
        finally:
            await client.aclose()

    asyncio.run(run())


def test_compare_and_put_elects_one_holder_and_a_lease_expiry_frees_the_key(
    etcd: EtcdServer,
) -> None:
    async def campaign(client: EtcdClient, name: str, lease: int) -> bool:
        result = await client.txn(
            [Compare("/election", "CREATE", 0)],
            [put_op("/election", name.encode(), lease)],
            [range_op("/election")],
        )
        return result.succeeded

    async def run() -> None:
        client = EtcdClient([etcd.url])
        try:
            first = await client.grant(1)
            second = await client.grant(30)
            assert await campaign(client, "a", first)
            assert not await campaign(client, "b", second)
            await asyncio.sleep(3)  # the first holder stops renewing: its key goes with its lease
            assert await client.keep_alive(first) == 0
            assert await campaign(client, "b", second)
            assert (await client.get("/election")).value == b"b"  # type: ignore[union-attr]
            await client.revoke(second)
            assert await client.get("/election") is None
        finally:
            await client.aclose()

    asyncio.run(run())


def test_route_table_round_trips_through_etcd_and_a_watch_follows_changes(
    etcd: EtcdServer,
) -> None:
    keys = ClusterKeys("c1")
    route = spread_queues("Orders", 8, ["g2", "g1"])
    assert [(q.queue_id, q.group, q.local_queue_id) for q in route.queues] == [
        (0, "g1", 0), (1, "g1", 1), (2, "g1", 2), (3, "g1", 3),
        (4, "g2", 0), (5, "g2", 1), (6, "g2", 2), (7, "g2", 3),
    ]  # fmt: skip
    master = BrokerMember("g1-a", "g1", "http://127.0.0.1:1", "127.0.0.1:2", "master", 3, 100)
    slave = BrokerMember("g1-b", "g1", "http://127.0.0.1:3", "127.0.0.1:4", "slave", 3, 90)

    async def run() -> None:
        client = EtcdClient([etcd.url])
        registry = RouteRegistry(client, "c1")
        seen: list[ClusterView] = []
        registry.listeners.append(seen.append)
        try:
            await registry.put_topic_route(route)
            await client.put(keys.master("g1"), master.to_json())
            await client.put(keys.broker("g1", "g1-a"), master.to_json())
            await client.put(keys.broker("g1", "g1-b"), slave.to_json())
            await client.put(keys.epoch("g1"), b'{"epoch": 3, "master": "g1-a"}')
            view = await registry.refresh()
            assert view.topics["Orders"] == route
            assert view.master_of("g1") == master
            assert view.groups["g1"].slaves == (slave,)
            assert view.groups["g1"].epoch == 3
            registry.start()
            await asyncio.sleep(0.3)
            await client.delete(keys.master("g1"))  # the master's lease lapsed
            for _ in range(100):
                if registry.view.master_of("g1") is None:
                    break
                await asyncio.sleep(0.05)
            assert registry.view.master_of("g1") is None
            assert seen and seen[-1].master_of("g1") is None
        finally:
            await registry.stop()
            await client.aclose()

    asyncio.run(run())


def test_etcd_down_is_a_clear_error_and_the_last_view_is_kept(etcd: EtcdServer) -> None:
    async def run() -> None:
        client = EtcdClient([etcd.url], timeout_s=1)
        registry = RouteRegistry(client, "c1")
        try:
            await registry.put_topic_route(spread_queues("T", 2, ["g1"]))
            await registry.refresh()
            etcd.stop()
            with pytest.raises(EtcdUnavailableError):
                await registry.refresh()
            assert "T" in registry.view.topics
            dead = EtcdClient([f"http://127.0.0.1:{free_port()}"], timeout_s=1)
            with pytest.raises(EtcdUnavailableError):
                await dead.get("/x")
            await dead.aclose()
        finally:
            await client.aclose()

    asyncio.run(run())


class CountingClient(EtcdClient):
    """A real etcd client that counts its reads of whole prefixes."""

    reads = 0

    async def get_prefix(self, prefix: str) -> Any:
        self.reads += 1
        return await super().get_prefix(prefix)


def test_the_watch_applies_each_change_without_reading_the_whole_table(etcd: EtcdServer) -> None:
    keys = ClusterKeys("c1")
    master = BrokerMember("g1-a", "g1", "http://127.0.0.1:1", "127.0.0.1:2", "master", 1, 0)

    async def run() -> None:
        client = CountingClient([etcd.url])
        registry = RouteRegistry(client, "c1")
        try:
            await registry.put_topic_route(spread_queues("Kept", 4, ["g1"]))
            await registry.put_topic_route(spread_queues("Gone", 2, ["g1"]))
            await client.put(keys.master("g1"), master.to_json())
            registry.start()
            for _ in range(100):
                if registry.view.master_of("g1") is not None:
                    break
                await asyncio.sleep(0.05)
            kept = registry.view.topics["Kept"]
            for offset in range(1, 21):  # a broker publishing its confirmed offset
                moved = dataclasses.replace(master, confirmed_offset=offset)
                await client.put(keys.broker("g1", "g1-a"), moved.to_json())
            await registry.put_topic_route(spread_queues("New", 2, ["g1"]))
            await client.delete(keys.topic("Gone"))
            await client.put(keys.master("g2"), dataclasses.replace(master, group="g2").to_json())
            await client.delete(keys.master("g1"))
            for _ in range(100):
                if registry.view.master_of("g1") is None:
                    break
                await asyncio.sleep(0.05)
            seen = registry.view
            assert client.reads == 1  # the first read only: every change came by the watch
            truth = await registry.refresh()
            assert (seen.revision, seen.groups, seen.topics) == (
                truth.revision,
                truth.groups,
                truth.topics,
            )
            assert sorted(seen.topics) == ["Kept", "New"] and seen.topics["Kept"] is kept
            assert seen.groups["g1"].slaves[0].confirmed_offset == 20
            assert seen.master_of("g2") is not None
        finally:
            await registry.stop()
            await client.aclose()

    asyncio.run(run())


def test_https_endpoints_are_checked_against_the_ca_and_see_our_certificate(
    tmp_path: Path,
) -> None:
    ours = make_certificates(tmp_path / "ours")
    theirs = make_certificates(tmp_path / "theirs", "other")
    etcd = start_etcd(tmp_path, ours)

    async def run() -> None:
        client = EtcdClient([etcd.url], tls=ours.tls())
        refused = [
            EtcdClient([etcd.url], timeout_s=1, tls=theirs.tls()),  # etcd of another CA
            EtcdClient([etcd.url], timeout_s=1, tls=TlsConfig(ca_file=ours.ca)),  # no cert
        ]
        try:
            await client.put("/tls/key", b"kept")
            for stranger in refused:
                with pytest.raises(EtcdUnavailableError):
                    await stranger.get("/tls/key")
            lease = EtcdLeaseClient([etcd.url], tls=ours.tls())
            assert await asyncio.to_thread(lease.grant, 5)
            lease.close()
        finally:
            for each in (client, *refused):
                await each.aclose()

    try:
        asyncio.run(run())
    finally:
        etcd.stop()

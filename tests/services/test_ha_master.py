"""The master's HA service against a hand-driven slave on a real TCP connection: streaming,
heartbeats, acked offsets, the sync-state set (gap and catch-up window) and sync puts; the
challenge a master with an auth file puts to its slaves, and the port over TLS."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, FlushDiskType, OutgoingMessage
from services.errors import NotMasterError, ReplicaRoleError
from services.ha import MasterAddress, split_host_port
from services.ha.auth import proof, replica_key
from services.ha.protocol import (
    CHALLENGE,
    NONCE_BYTES,
    OFFSET_REPORT,
    REFUSED,
    TRANSFER_HEADER,
    hello,
)
from services.tls import TlsConfig
from tests.services.conftest import SMALL, wait_for
from tests.tls_support import make_certificates


class FakeSlave:
    """A slave driven by the test: it reads batches and acks only when told to."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.received = bytearray()
        self.start: int | None = None

    @classmethod
    async def connect(
        cls, broker: Broker, name: str, offset: int = 0, tls: ssl.SSLContext | None = None
    ) -> FakeSlave:
        address = broker.replica.ha_address
        assert address is not None
        host, port = split_host_port(address)
        reader, writer = await asyncio.open_connection(
            host, port, ssl=tls, server_hostname=host if tls else None
        )
        writer.write(hello(name) + OFFSET_REPORT.pack(offset))
        await writer.drain()
        return cls(reader, writer)

    async def read_batch(self) -> tuple[int, bytes]:
        offset, size = TRANSFER_HEADER.unpack(await self.reader.readexactly(TRANSFER_HEADER.size))
        data = await self.reader.readexactly(size) if size else b""
        if data:
            if self.start is None:
                self.start = offset
            assert offset == self.start + len(self.received)
            self.received += data
        return offset, data

    async def read_until(self, end: int) -> None:
        while self.start is None or self.start + len(self.received) < end:
            await self.read_batch()

    async def ack(self, offset: int) -> None:
        self.writer.write(OFFSET_REPORT.pack(offset))
        await self.writer.drain()

    async def close(self) -> None:
        self.writer.close()
        await asyncio.gather(self.writer.wait_closed(), return_exceptions=True)


async def make_broker(tmp_path: Path, **overrides: object) -> Broker:
    config = BrokerConfig(
        tmp_path / "store",
        overrides.pop("store", SMALL),  # type: ignore[arg-type]
        broker_name="m",
        ha_listen="127.0.0.1:0",
        **overrides,  # type: ignore[arg-type]
    )
    broker = Broker(config)
    await broker.start()
    return broker


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = await make_broker(tmp_path)
    yield broker
    await broker.stop()


async def send(broker: Broker, body: bytes, count: int = 1) -> list[str]:
    messages = [OutgoingMessage(body, queue_id=0) for _ in range(count)]
    receipts = await broker.send.send("HaT", messages)
    return [r.status for r in receipts]


def commit_log(broker: Broker, start: int, end: int) -> bytes:
    directory = broker.config.store_dir / "commitlog"
    data = b"".join(p.read_bytes() for p in sorted(directory.iterdir()))
    return data[start:end]


async def test_streams_the_commit_log_and_heartbeats(broker: Broker) -> None:
    await send(broker, b"a" * 100, count=5)
    slave = await FakeSlave.connect(broker, "s1")
    end = broker.replica.status().max_physical_offset
    await slave.read_until(end)
    assert slave.start == 0
    assert bytes(slave.received) == commit_log(broker, 0, end)
    offset, data = await asyncio.wait_for(slave.read_batch(), 10)  # idle: a heartbeat
    assert (offset, data) == (end, b"")
    await send(broker, b"later")  # an append wakes the connection
    await slave.read_until(broker.replica.status().max_physical_offset)
    await slave.close()


async def test_sync_state_set_and_listeners(broker: Broker) -> None:
    seen: list[frozenset[str]] = []
    broker.replica.sync_state_listeners.append(seen.append)
    await send(broker, b"x" * 50, count=3)
    slave = await FakeSlave.connect(broker, "s1")
    end = broker.replica.status().max_physical_offset
    await slave.read_until(end)
    assert broker.replica.sync_state_set() == frozenset()  # connected, but nothing acked yet
    await slave.ack(end)
    await wait_for(lambda: broker.replica.sync_state_set() == frozenset({"s1"}))
    status = broker.replica.status()
    [view] = status.slaves
    assert (view.name, view.acked_offset, view.lag_bytes, view.in_sync) == ("s1", end, 0, True)
    assert seen == [frozenset({"s1"})]
    await slave.close()
    await wait_for(lambda: broker.replica.sync_state_set() == frozenset())
    assert seen == [frozenset({"s1"}), frozenset()]


async def test_a_slave_too_far_behind_leaves_the_set(tmp_path: Path) -> None:
    broker = await make_broker(tmp_path, ha_max_gap_bytes=2000)
    try:
        slave = await FakeSlave.connect(broker, "s1")
        await send(broker, b"y" * 10)
        end = broker.replica.status().max_physical_offset
        await slave.read_until(end)
        await slave.ack(end)
        await wait_for(lambda: broker.replica.sync_state_set() == frozenset({"s1"}))
        await send(broker, b"z" * 500, count=6)  # > 2000 bytes the slave does not ack
        await slave.ack(end)
        await wait_for(lambda: broker.replica.sync_state_set() == frozenset())
        [view] = broker.replica.status().slaves
        assert view.lag_bytes > 2000 and not view.in_sync
        assert view.lag_seconds is not None and view.lag_seconds >= 0
        await slave.close()
    finally:
        await broker.stop()


async def test_a_slave_not_caught_up_within_the_window_leaves_the_set(tmp_path: Path) -> None:
    broker = await make_broker(tmp_path, ha_catch_up_window_s=0.3)
    try:
        slave = await FakeSlave.connect(broker, "s1")
        await send(broker, b"y")
        end = broker.replica.status().max_physical_offset
        await slave.read_until(end)
        await slave.ack(end)
        await wait_for(lambda: broker.replica.sync_state_set() == frozenset({"s1"}))
        await send(broker, b"more")  # never acked: the slave is not caught up any more
        await wait_for(lambda: broker.replica.sync_state_set() == frozenset())
        await slave.close()
    finally:
        await broker.stop()


async def test_sync_replication_statuses(tmp_path: Path) -> None:
    store = dataclasses.replace(SMALL, sync_flush_timeout_ms=300)
    broker = await make_broker(tmp_path, replication="sync", store=store)
    try:
        assert await send(broker, b"alone") == ["SLAVE_NOT_AVAILABLE"]
        slave = await FakeSlave.connect(broker, "s1")
        end = broker.replica.status().max_physical_offset
        await slave.read_until(end)
        await slave.ack(end)
        await wait_for(lambda: broker.replica.sync_state_set() == frozenset({"s1"}))
        # Acked as soon as the slave reports the put's end offset.
        put = asyncio.create_task(send(broker, b"waits"))
        await asyncio.sleep(0)
        assert not put.done()
        end = broker.replica.status().max_physical_offset
        await slave.read_until(end)
        await slave.ack(end)
        assert await asyncio.wait_for(put, 10) == ["PUT_OK"]
        # Not acked: stored, answered FLUSH_SLAVE_TIMEOUT.
        assert await send(broker, b"ignored", count=2) == ["FLUSH_SLAVE_TIMEOUT"] * 2
        await slave.close()
    finally:
        await broker.stop()


async def test_sync_replication_with_sync_flush(tmp_path: Path) -> None:
    """SYNC_FLUSH and sync replication: the put waits for its fsync, then for the slave."""
    store = dataclasses.replace(SMALL, flush_disk_type=FlushDiskType.SYNC_FLUSH)
    broker = await make_broker(tmp_path, replication="sync", store=store)
    try:
        slave = await FakeSlave.connect(broker, "s1")
        await send(broker, b"first")  # SLAVE_NOT_AVAILABLE until the slave acks
        end = broker.replica.status().max_physical_offset
        await slave.read_until(end)
        await slave.ack(end)
        await wait_for(lambda: broker.replica.sync_state_set() == frozenset({"s1"}))
        put = asyncio.create_task(send(broker, b"durable"))
        end = end + 1  # the put's end is past the last ack
        await slave.read_until(end)
        end = slave.start + len(slave.received) if slave.start is not None else end
        await slave.ack(end)
        assert await asyncio.wait_for(put, 10) == ["PUT_OK"]
        assert broker.replica.status().confirmed_offset >= end  # flushed on the master
        await slave.close()
    finally:
        await broker.stop()


async def test_a_slave_past_the_masters_end_is_refused(broker: Broker) -> None:
    await send(broker, b"short")
    slave = await FakeSlave.connect(broker, "ahead", offset=10_000_000)
    answer = await asyncio.wait_for(slave.reader.read(), 10)  # all, until the master closes
    offset, size = TRANSFER_HEADER.unpack_from(answer)
    assert (offset, len(answer)) == (REFUSED, TRANSFER_HEADER.size + size)
    assert b"reports offset 10000000, past this master's end" in answer
    assert broker.replica.status().slaves == ()
    await slave.close()


async def test_roles(broker: Broker, tmp_path: Path) -> None:
    broker.replica.check_writable()  # a master takes writes
    with pytest.raises(ReplicaRoleError):
        await broker.replica.promote(5)
    with pytest.raises(ReplicaRoleError):
        await broker.replica.follow(MasterAddress("x", "http://127.0.0.1:1", "127.0.0.1:1"))
    with pytest.raises(ValueError):
        BrokerConfig(tmp_path / "other", role="slave")  # a slave needs its master
    slave = Broker(
        BrokerConfig(
            tmp_path / "slave",
            SMALL,
            role="slave",
            master=MasterAddress("m", "http://127.0.0.1:1", "127.0.0.1:1"),
        )
    )
    await slave.start()
    try:
        with pytest.raises(NotMasterError) as refused:
            slave.replica.check_writable()
        assert refused.value.master == "http://127.0.0.1:1"
        assert slave.replica.role == "slave" and slave.replica.status().role == "slave"
        with pytest.raises(ReplicaRoleError):
            await slave.replica.promote(0)  # not a new epoch
    finally:
        await slave.stop()


TOKEN = "smq_replication-token"


async def challenged(broker: Broker, name: str) -> tuple[FakeSlave, bytes]:
    """A slave connected to a master that asks for a proof; the nonce it was sent."""
    slave = await FakeSlave.connect(broker, name)
    header = await asyncio.wait_for(slave.reader.readexactly(TRANSFER_HEADER.size), 10)
    assert TRANSFER_HEADER.unpack(header) == (CHALLENGE, NONCE_BYTES)
    return slave, await slave.reader.readexactly(NONCE_BYTES)


@pytest.mark.parametrize("answer", ["another token", "another name", "no proof"])
async def test_a_slave_without_the_proof_gets_no_byte_of_the_commit_log(
    tmp_path: Path, answer: str
) -> None:
    broker = await make_broker(tmp_path, ha_accepted_keys=frozenset({replica_key(TOKEN)}))
    try:
        await send(broker, b"secret", count=3)
        slave, nonce = await challenged(broker, "intruder")
        if answer == "no proof":
            slave.writer.write_eof()
        else:
            key = replica_key(TOKEN if answer == "another name" else "smq_guessed")
            slave.writer.write(proof(key, nonce, "b" if answer == "another name" else "intruder"))
        rest = await asyncio.wait_for(slave.reader.read(), 10)  # all, until the master closes
        offset, size = TRANSFER_HEADER.unpack_from(rest)
        assert (offset, len(rest)) == (REFUSED, TRANSFER_HEADER.size + size)  # the last frame
        assert b"proof" in rest and b"secret" not in rest
        assert broker.replica.status().slaves == ()
        await slave.close()
    finally:
        await broker.stop()


async def test_a_slave_proving_an_accepted_token_streams(tmp_path: Path) -> None:
    keys = frozenset({replica_key("smq_other-admin"), replica_key(TOKEN)})
    broker = await make_broker(tmp_path, ha_accepted_keys=keys)
    try:
        await send(broker, b"kept", count=2)
        slave, nonce = await challenged(broker, "b")
        slave.writer.write(proof(replica_key(TOKEN), nonce, "b"))
        end = broker.replica.status().max_physical_offset
        await slave.read_until(end)
        assert bytes(slave.received) == commit_log(broker, 0, end)
        await wait_for(lambda: [s.name for s in broker.replica.status().slaves] == ["b"])
        await slave.close()
    finally:
        await broker.stop()


async def test_over_tls_the_port_takes_only_slaves_with_a_certificate_of_its_ca(
    tmp_path: Path,
) -> None:
    ours = make_certificates(tmp_path / "ours")
    theirs = make_certificates(tmp_path / "theirs", "other")
    broker = await make_broker(tmp_path, tls=ours.tls())
    try:
        await send(broker, b"over tls")
        refused = [
            TlsConfig(theirs.cert, theirs.key, ours.ca).client_context(),  # another CA's
            TlsConfig(ca_file=ours.ca).client_context(),  # none at all
        ]
        for context in refused:
            slave = await FakeSlave.connect(broker, "stranger", tls=context)
            try:
                with pytest.raises((ssl.SSLError, ConnectionError, asyncio.IncompleteReadError)):
                    await asyncio.wait_for(slave.read_batch(), 10)
            finally:
                await slave.close()
        with pytest.raises(ssl.SSLCertVerificationError):  # a master of another CA
            await FakeSlave.connect(broker, "b", tls=theirs.client_context())
        slave = await FakeSlave.connect(broker, "b", tls=ours.client_context())
        end = broker.replica.status().max_physical_offset
        await slave.read_until(end)
        assert bytes(slave.received) == commit_log(broker, 0, end)
        await slave.close()
    finally:
        await broker.stop()

"""Keyed sends with SYNC_FLUSH: a repeat is found while the first is not yet in the index
(dispatch runs only after the flush), and concurrent repeats append once."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, FlushDiskType, OutgoingMessage
from storage import MessageStore
from tests.services.conftest import SMALL

ORDER = OutgoingMessage(b"order 42 paid", keys=("order-42",))


@pytest.fixture
async def sync_broker(tmp_path: Path) -> AsyncIterator[Broker]:
    store = dataclasses.replace(
        SMALL, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout_ms=200
    )
    broker = Broker(BrokerConfig(tmp_path / "store", store))
    await broker.start()
    await broker.send.send("Orders", [OutgoingMessage(b"first of the topic")])
    yield broker
    await broker.stop()


def store_of(broker: Broker) -> MessageStore:
    store = broker._store
    assert store is not None
    return store


async def test_a_repeat_finds_a_send_the_index_does_not_hold_yet(sync_broker: Broker) -> None:
    store = store_of(sync_broker)
    # No group commit: what is appended now is neither flushed nor dispatched (nor indexed).
    await asyncio.to_thread(store.stop_services)
    [first] = await sync_broker.send.send("Orders", [ORDER], idempotency_key="order-42-paid")
    assert first.status == "FLUSH_DISK_TIMEOUT"  # answered: stored, not confirmed on disk
    assert store.keyed.find("Orders", "order-42-paid", 0) is None
    end = store.max_physical_offset

    [again] = await sync_broker.send.send("Orders", [ORDER], idempotency_key="order-42-paid")
    assert again.replayed
    assert again._replace(replayed=False) == first
    assert store.max_physical_offset == end

    store.start_services()  # the repeat now waits for the flush, as the first one did
    [settled] = await sync_broker.send.send("Orders", [ORDER], idempotency_key="order-42-paid")
    assert (settled.replayed, settled.status, settled.msg_id) == (True, "PUT_OK", first.msg_id)
    assert store.keyed.find("Orders", "order-42-paid", 0) is not None  # dispatched, indexed
    idempotency = sync_broker.services.idempotency
    idempotency.find("Orders", "order-42-paid", None, 0)
    assert idempotency.unindexed_count == 0  # memory held it only until the index did
    assert store.max_physical_offset == end


async def test_concurrent_repeats_append_once(sync_broker: Broker) -> None:
    store = store_of(sync_broker)
    batch = [OutgoingMessage(b"a"), OutgoingMessage(b"b")]
    answers = await asyncio.gather(
        *(sync_broker.send.send("Orders", batch, idempotency_key="twice") for _ in range(6))
    )
    assert sum(not receipts[0].replayed for receipts in answers) == 1
    assert len({tuple(r.msg_id for r in receipts) for receipts in answers}) == 1
    assert {r.status for receipts in answers for r in receipts} == {"PUT_OK"}
    [first, second] = answers[0]
    assert second.queue_offset == first.queue_offset + 1
    assert store.max_offset_in_queue("Orders", first.queue_id) == second.queue_offset + 1

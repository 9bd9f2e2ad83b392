"""Keyed sends with SYNC_FLUSH: a repeat is found while the first is not yet in the index
(dispatch runs only after the flush), and concurrent repeats append once."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, FlushDiskType, OutgoingMessage
from services.errors import IdempotencyKeyReusedError
from services.send_payload import VERSION, earlier_form, fingerprint
from storage import Message, MessageStore
from storage.record.layout import body_crc
from storage.record.properties import (
    PROPERTY_IDEMPOTENCY_BATCH,
    PROPERTY_IDEMPOTENCY_FINGERPRINT,
    PROPERTY_IDEMPOTENCY_KEY,
    PROPERTY_UNIQ_KEY,
)
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


async def test_a_repeat_of_a_send_stored_before_crc_fingerprints_is_found(
    sync_broker: Broker,
) -> None:
    """Records stored by earlier versions carry the SHA-256 of their bodies as the
    fingerprint: a repeat of that send (one message, a batch, or bodies alone) is still
    answered with it, and another payload under the key is still refused."""
    store = store_of(sync_broker)
    bodies = [b"order 43 paid", b"order 43 shipped"]
    stored_before = earlier_form(bodies, repr(([13, 16], [0, 0], [])))
    assert not stored_before.startswith(VERSION)
    now = int(time.time() * 1000)
    first = Message(
        "Orders",
        bodies[0],
        0,
        {
            PROPERTY_UNIQ_KEY: "U-43-1",
            PROPERTY_IDEMPOTENCY_KEY: "order-43",
            PROPERTY_IDEMPOTENCY_FINGERPRINT: stored_before,
            PROPERTY_IDEMPOTENCY_BATCH: "2",
        },
        born_timestamp=now,
    )
    second = Message("Orders", bodies[1], 0, {PROPERTY_UNIQ_KEY: "U-43-2"}, born_timestamp=now)
    written = store.put([first, second])
    deadline = time.monotonic() + 10
    while store.keyed.find("Orders", "order-43", 0) is None:  # dispatched, indexed
        assert time.monotonic() < deadline, "the records were never indexed"
        await asyncio.sleep(0.01)
    end = store.max_physical_offset

    messages = [OutgoingMessage(body) for body in bodies]
    again = await sync_broker.send.send("Orders", messages, idempotency_key="order-43")
    assert [r.replayed for r in again] == [True, True]
    assert [r.queue_offset for r in again] == [w.queue_offset for w in written]
    assert [(r.replayed, r.uniq_key) for r in again] == [(True, "U-43-1"), (True, "U-43-2")]
    with pytest.raises(IdempotencyKeyReusedError):
        lost = [OutgoingMessage(b"order 43 lost")]
        await sync_broker.send.send("Orders", lost, idempotency_key="order-43")
    with pytest.raises(IdempotencyKeyReusedError):
        await sync_broker.send.send("Orders", messages[:1], idempotency_key="order-43")
    assert store.max_physical_offset == end


async def test_a_keyed_batch_stores_the_crcs_its_fingerprint_is_made_of(
    sync_broker: Broker,
) -> None:
    store = store_of(sync_broker)
    bodies = [b"x" * 100, b"y" * 3, b""]
    messages = [OutgoingMessage(body) for body in bodies]
    sent = await sync_broker.send.send("Orders", messages, idempotency_key="crc-batch")
    records = [store.look_message_by_offset(r.commit_log_offset) for r in sent]
    assert [r.body_crc for r in records if r is not None] == [body_crc(b) for b in bodies]
    assert records[0] is not None
    stamped = records[0].properties[PROPERTY_IDEMPOTENCY_FINGERPRINT]
    assert stamped == fingerprint(messages, [0, 0, 0]).value
    assert stamped.startswith(VERSION)

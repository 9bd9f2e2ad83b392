"""Message lookups: by key within a byte budget, by id, and browsing one queue without
consuming it."""

from __future__ import annotations

import dataclasses

import pytest

from services import Broker, OutgoingMessage
from services.errors import InvalidMessageIdError, MessageNotFoundError, QueueNotFoundError
from services.messages import as_shown, within_bytes
from storage import Message
from tests.services.conftest import World


async def test_key_lookups_keep_to_a_byte_budget(world: World) -> None:
    for i in range(5):
        world.store.put([Message("Big", bytes([65 + i]) * 1000, properties={"KEYS": "same"})])
    found = world.store.query_message("Big", "same")
    assert len(found) == 5
    assert len(within_bytes(found, 2500)) == 2
    assert len(within_bytes(found, 10)) == 1, "the first always"
    assert within_bytes(found, None) == found


async def test_by_key_and_by_id(broker: Broker) -> None:
    sent = await broker.send.send(
        "Keyed", [OutgoingMessage(b"a" * 1000, keys=("k",), queue_id=0) for _ in range(3)]
    )
    messages = broker.messages
    assert len(messages.by_key("Keyed", "k")) == 3
    assert len(messages.by_key("Keyed", "k", max_bytes=1500)) == 1
    assert messages.by_id(sent[1].msg_id).queue_offset == 1
    assert messages.by_id(sent[2].uniq_key).queue_offset == 2
    with pytest.raises(InvalidMessageIdError):
        messages.by_id("not hex")
    with pytest.raises(MessageNotFoundError):
        messages.by_id("0" * 32)


async def test_browse_pages_a_queue_without_consuming_it(broker: Broker) -> None:
    await broker.send.send(
        "Paged", [OutgoingMessage(f"m{i}".encode()) for i in range(5)], batch_queue_id=1
    )
    messages = broker.messages
    first = messages.browse("Paged", 1, 0, 2)
    assert [m.body for m in first.messages] == [b"m0", b"m1"]
    assert (first.more, first.min_offset, first.max_offset) == (True, 0, 5)
    rest = messages.browse("Paged", 1, 3, 10)
    assert [m.body for m in rest.messages] == [b"m3", b"m4"] and not rest.more
    assert messages.browse("Paged", 1, 99, 10).messages == [], "a start past the end: none"
    assert messages.browse("Paged", 0, 0, 10).messages == []
    until = first.messages[0].store_timestamp - 1
    assert messages.browse("Paged", 1, 0, 10, until_ms=until).messages == []
    with pytest.raises(QueueNotFoundError):
        messages.browse("Paged", 8, 0, 10)
    assert broker.metrics.messages_out["Paged"] == 0, "browsing is not consuming"


async def test_lookups_and_browses_show_no_bookkeeping(broker: Broker) -> None:
    """A keyed send's record carries its key and fingerprint for the broker; no reader is
    shown them, and a message without any is passed on as it is."""
    [keyed] = await broker.send.send(
        "Stamped", [OutgoingMessage(b"x", keys=("k",), queue_id=0)], idempotency_key="order-7"
    )
    messages = broker.messages
    store = broker._store  # the record as stored, with the broker's own properties
    assert store is not None
    record = store.look_message_by_id(keyed.msg_id)
    assert record is not None and record.properties["IDEMPOTENCY_KEY"] == "order-7"
    shown = [
        messages.by_id(keyed.msg_id),
        *messages.by_key("Stamped", "k"),
        *messages.browse("Stamped", 0, 0, 10).messages,
    ]
    assert [m.properties for m in shown] == [{"KEYS": "k", "UNIQ_KEY": keyed.uniq_key}] * 3
    plain = dataclasses.replace(record, properties={"UNIQ_KEY": keyed.uniq_key})
    assert as_shown(plain) is plain

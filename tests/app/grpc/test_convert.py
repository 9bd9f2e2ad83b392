"""Protocol messages to the services' values and back."""

from __future__ import annotations

import zlib

import pytest

from app.grpc.convert import (
    ProtocolError,
    filter_of,
    message_of,
    outgoing_of,
    pulled_message_of,
    receive_options_of,
    recover_command_of,
)
from app.grpc.protocol import Code, MessageType, definition, service
from services.pop.service import ReceivedMessage
from services.transaction.service import CheckOffer
from services.transaction.table import Transaction
from storage.record.fields import NamedView
from storage.record.message import StoredMessage


def test_a_producers_message_keeps_tag_keys_properties_group_id_and_delivery_time() -> None:
    message = definition.Message(body=b"x", user_properties={"color": "red"})
    system = message.system_properties
    system.tag, system.message_id, system.message_group = "t", "ID-1", "g"
    system.keys.extend(["k1", "k2"])
    system.delivery_timestamp.seconds = 1_700_000_000
    out = outgoing_of(message)
    assert (out.body, out.tags, tuple(out.keys), out.sharding_key) == (b"x", "t", ("k1", "k2"), "g")
    assert out.properties == {"color": "red", "UNIQ_KEY": "ID-1", "__SHARDINGKEY": "g"}
    assert out.deliver_at == 1_700_000_000_000


def test_a_received_message_carries_its_system_properties_and_a_crc32_digest() -> None:
    properties = {"TAGS": "t", "KEYS": "a b", "UNIQ_KEY": "ID-1", "__SHARDINGKEY": "g", "x": "1"}
    stored = StoredMessage(
        "orders", 2, 7, 100, 50, b"body", properties, 0, 0, 0, 1000, ("10.0.0.1", 5),
        2000, ("127.0.0.1", 8080), 0, 0,
    )  # fmt: skip
    out = message_of(ReceivedMessage(stored, "orders", "handle", 3, 9999))
    system = out.system_properties
    assert (out.topic.name, out.body, dict(out.user_properties)) == ("orders", b"body", {"x": "1"})
    assert (system.tag, list(system.keys), system.message_id) == ("t", ["a", "b"], "ID-1")
    assert (system.message_group, system.message_type) == ("g", MessageType.FIFO)
    assert (system.receipt_handle, system.delivery_attempt, system.queue_offset) == ("handle", 3, 7)
    assert system.body_digest.checksum == format(zlib.crc32(b"body"), "08X")


def test_filters_and_receive_limits() -> None:
    assert filter_of(
        definition.FilterExpression(type=definition.FilterType.TAG, expression="*")
    ) == (None, None)
    sql = definition.FilterExpression(type=definition.FilterType.SQL, expression="a > 1")
    assert filter_of(sql) == (None, "a > 1")
    request = service.ReceiveMessageRequest(batch_size=8)
    request.invisible_duration.seconds = 30
    options = receive_options_of(request, None)
    assert (options.max_messages, options.invisible_ms) == (8, 30_000)
    request.invisible_duration.seconds = 0
    with pytest.raises(ProtocolError) as raised:
        receive_options_of(request, None)
    assert raised.value.code == Code.ILLEGAL_INVISIBLE_TIME


def test_a_pulled_message_carries_its_queue_offset_and_attempt() -> None:
    view = NamedView(
        "ID", "orders", 1, 4, 100, 50, b"b", "t", ["k"], {"UNIQ_KEY": "U", "x": "1"}, 10, 20, 2
    )
    out = pulled_message_of(view)
    system = out.system_properties
    assert (out.topic.name, out.body, dict(out.user_properties)) == ("orders", b"b", {"x": "1"})
    assert (system.tag, list(system.keys), system.message_id) == ("t", ["k"], "U")
    assert (system.queue_id, system.queue_offset, system.delivery_attempt) == (1, 4, 3)


def test_a_check_offer_becomes_a_recover_command_for_the_real_topic() -> None:
    half = StoredMessage(
        "RMQ_SYS_TRANS_HALF_TOPIC", 0, 3, 100, 50, b"body", {"TAGS": "t", "UNIQ_KEY": "TX"},
        0, 0, 0, 1000, ("10.0.0.1", 5), 2000, ("127.0.0.1", 8080), 0, 0,
    )  # fmt: skip
    transaction = Transaction("TX", "orders", "orders", 0, 3, 100, "MSG", 2000, 0)
    command = recover_command_of(CheckOffer(transaction, half, 0))
    recover = command.recover_orphaned_transaction_command
    assert recover.transaction_id == "TX"
    assert (recover.message.topic.name, recover.message.body) == ("orders", b"body")
    system = recover.message.system_properties
    assert (system.message_id, system.message_type, system.tag) == (
        "TX",
        MessageType.TRANSACTION,
        "t",
    )

"""Between RocketMQ 5's protocol and the proxy's HTTP JSON: what each side is turned into."""

from __future__ import annotations

import base64

import pytest
from rocketmq.grpc_protocol import (  # type: ignore[import-untyped]
    definition_pb2,
    service_pb2,
)

from app.grpc.convert import ProtocolError, endpoints_of
from app.grpc.proxy_convert import (
    ack_status,
    message_json,
    problem_status,
    queues_json,
    receive_json,
    received_of,
    send_entries,
    send_json,
)

Code = definition_pb2.Code


def producer_message(**system: object) -> object:
    message = definition_pb2.Message(
        topic=definition_pb2.Resource(name="Orders"),
        body=b"\x00binary\xff",
        user_properties={"color": "red"},
    )
    message.system_properties.message_id = "01ABC"
    for name, value in system.items():
        if name == "keys":
            message.system_properties.keys.extend(value)
        elif name == "delivery_ms":
            ms = int(value)  # type: ignore[call-overload]
            message.system_properties.delivery_timestamp.seconds = ms // 1000
            message.system_properties.delivery_timestamp.nanos = ms % 1000 * 1_000_000
        else:
            setattr(message.system_properties, name, value)
    return message


def test_a_producer_message_becomes_a_json_send_with_its_id_group_and_time() -> None:
    out = message_json(
        producer_message(tag="paid", keys=["k1", "k2"], message_group="order-7", delivery_ms=1234)
    )
    assert base64.b64decode(out["body"]) == b"\x00binary\xff"
    assert out["body_encoding"] == "base64"
    assert out["tags"] == "paid"
    assert out["keys"] == ["k1", "k2"]
    assert out["sharding_key"] == "order-7"
    assert out["deliver_at"] == 1234
    assert out["properties"] == {"color": "red", "UNIQ_KEY": "01ABC", "__SHARDINGKEY": "order-7"}


def test_several_messages_are_one_batch_and_a_transactional_one_is_not_taken_yet() -> None:
    assert len(send_json([producer_message(), producer_message()])["messages"]) == 2
    assert "messages" not in send_json([producer_message()])
    with pytest.raises(ProtocolError) as refused:
        message_json(producer_message(message_type=definition_pb2.MessageType.TRANSACTION))
    assert refused.value.code == Code.NOT_IMPLEMENTED


def test_receipts_become_send_result_entries() -> None:
    answer = {
        "messages": [{"uniq_key": "01ABC", "queue_offset": 5, "timer_handle": "h"}],
        "broker_group": "g1",
    }
    [entry] = send_entries(answer)
    assert (entry.message_id, entry.offset, entry.recall_handle) == ("01ABC", 5, "h")
    assert entry.status.code == Code.OK


def test_a_route_lists_every_cluster_wide_queue_at_the_proxys_address() -> None:
    route = {
        "topic": "Orders",
        "queues": [
            {"queue_id": 0, "group": "g1", "local_queue_id": 0},
            {"queue_id": 1, "group": "g2", "local_queue_id": 0},
        ],
    }
    queues = queues_json(route, endpoints_of("127.0.0.1", 8181))
    assert [(q.id, q.broker.name) for q in queues] == [(0, "g1"), (1, "g2")]
    assert {q.broker.endpoints.addresses[0].port for q in queues} == {8181}
    assert {q.permission for q in queues} == {definition_pb2.Permission.READ_WRITE}


def test_a_receive_asks_in_base64_within_the_proxys_long_poll_bound() -> None:
    request = service_pb2.ReceiveMessageRequest(
        batch_size=8,
        filter_expression=definition_pb2.FilterExpression(
            type=definition_pb2.FilterType.TAG, expression="a||b"
        ),
    )
    request.long_polling_timeout.seconds = 60
    request.invisible_duration.seconds = 30
    assert receive_json(request) == {
        "max_messages": 8,
        "wait_ms": 30_000,
        "invisible_ms": 30_000,
        "body_encoding": "base64",
        "tags": "a||b",
    }


def test_a_received_message_keeps_its_id_group_handle_and_cluster_queue() -> None:
    item = {
        "msg_id": "OFFSETID",
        "topic": "Orders",
        "queue_id": 6,
        "queue_offset": 3,
        "body": base64.b64encode(b"\x00binary").decode(),
        "body_encoding": "base64",
        "tags": "paid",
        "keys": ["k1"],
        "properties": {"UNIQ_KEY": "01ABC", "__SHARDINGKEY": "order-7", "color": "red"},
        "born_timestamp": 1_000,
        "store_timestamp": 2_500,
        "receipt_handle": "g2~abc.def",
        "delivery_attempt": 2,
        "broker_group": "g2",
    }
    message = received_of(item, 30_000)
    system = message.system_properties
    assert message.body == b"\x00binary"
    assert dict(message.user_properties) == {"color": "red"}
    assert (system.message_id, system.message_group, system.tag) == ("01ABC", "order-7", "paid")
    assert system.message_type == definition_pb2.MessageType.FIFO
    assert (system.queue_id, system.queue_offset, system.delivery_attempt) == (6, 3, 2)
    assert system.receipt_handle == "g2~abc.def"
    assert system.store_timestamp.seconds == 2 and system.store_timestamp.nanos == 500_000_000
    assert system.invisible_duration.seconds == 30


def test_ack_outcomes_and_problems_become_statuses() -> None:
    assert ack_status({"outcome": "acked"}).code == Code.OK
    assert ack_status({"outcome": "expired", "detail": "late"}).code == Code.INVALID_RECEIPT_HANDLE
    failed = ack_status({"outcome": "failed", "code": "TOO_MANY_WAITERS", "detail": "busy"})
    assert failed.code == Code.TOO_MANY_REQUESTS
    missing = problem_status(404, {"code": "TOPIC_NOT_FOUND", "detail": "no such topic"})
    assert (missing.code, missing.message) == (Code.TOPIC_NOT_FOUND, "no such topic")
    assert problem_status(502, {}).code == Code.INTERNAL_SERVER_ERROR

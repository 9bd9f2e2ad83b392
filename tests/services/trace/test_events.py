"""Trace events and the records of RMQ_SYS_TRACE_TOPIC: their JSON, keys and splitting."""

from __future__ import annotations

from typing import Any

import orjson

from services.trace.events import (
    MAX_KEYS_CHARS,
    Consumer,
    EventTexts,
    TraceEvent,
    event_from_json,
    events_of,
    position_key,
    record_keys,
    trace_records,
)
from storage import StoredMessage
from storage.record.properties import PROPERTY_KEYS, PROPERTY_TAGS
from storage.topic_names import TRACE_TOPIC

MSG = "0A00000100002A9F00000000000000AA"


def event(msg_id: str = MSG, **fields: Any) -> TraceEvent:
    return TraceEvent(**{"type": "stored", "at": 1000, "msg_id": msg_id, "topic": "T", **fields})


def stored(message_body: bytes, keys: str) -> StoredMessage:
    return StoredMessage(
        TRACE_TOPIC, 0, 0, 0, 0, message_body, {PROPERTY_KEYS: keys}, 0, 0, 0, 0,
        ("127.0.0.1", 0), 0, ("127.0.0.1", 0), 0, 0,
    )  # fmt: skip


def test_an_event_survives_its_json_form() -> None:
    original = event(
        type="delivered",
        queue_id=1,
        queue_offset=7,
        group="billing",
        attempt=2,
        consumer=Consumer("alice", "10.0.0.1:5000", "worker-7"),
        detail={"via": "pop", "delivered_at": 999},
    )
    again = event_from_json(orjson.loads(orjson.dumps(original.to_json())))
    assert again == original
    assert set(original.to_json()) == {
        "type", "at", "msg_id", "topic", "queue_id", "queue_offset", "group", "attempt",
        "consumer", "detail",
    }  # fmt: skip


def test_a_record_is_keyed_by_its_ids_and_keys_and_tagged_by_its_first_type() -> None:
    events = [
        event(keys=("order-1", "has space")),
        event(type="acked", group="g"),
        event(msg_id="B" * 32, type="redriven", detail={"new_msg_id": "C" * 56}),
    ]
    [record] = trace_records(events)
    assert record.topic == TRACE_TOPIC
    assert record.properties[PROPERTY_TAGS] == "stored"
    assert record.properties[PROPERTY_KEYS].split(" ") == [
        MSG, "order-1", "hasspace", "B" * 32, "C" * 56,
    ]  # fmt: skip
    body = orjson.loads(record.body)
    assert body["v"] == 1
    assert [e["type"] for e in body["events"]] == ["stored", "acked", "redriven"]
    read = events_of(stored(record.body, record.properties[PROPERTY_KEYS]))
    assert [(e.type, e.msg_id, e.group) for e in read] == [
        ("stored", MSG, None),
        ("acked", MSG, "g"),
        ("redriven", "B" * 32, None),
    ]


def test_a_batch_too_large_for_one_record_s_keys_is_split() -> None:
    events = [event(msg_id=f"{n:032X}") for n in range(2000)]
    records = trace_records(events)
    assert len(records) > 1
    assert all(len(r.properties[PROPERTY_KEYS]) <= MAX_KEYS_CHARS for r in records)
    assert sum(len(orjson.loads(r.body)["events"]) for r in records) == 2000
    assert record_keys(events[:2]) == f"{0:032X} {1:032X}"


def test_a_body_that_is_not_a_trace_batch_holds_no_events() -> None:
    assert events_of(stored(b"not json", "")) == []
    assert events_of(stored(b'{"v": 1, "events": [{"type": "stored"}]}', "")) == []


def test_busy_steps_are_keyed_by_where_the_copy_is_and_the_rest_by_id() -> None:
    events = [
        event(queue_id=1, queue_offset=70),
        event(type="acked", queue_id=1, queue_offset=71, group="g"),
        event(type="sent_back", queue_id=0, queue_offset=3, group="g"),
    ]
    assert record_keys(events).split(" ") == ["T@1@2", "T@1@2@g", MSG]
    assert position_key("T", 1, 31) == "T@1@0"
    assert position_key("T", 1, 32, "g") == "T@1@1@g"


def test_events_as_text_make_one_record() -> None:
    texts = EventTexts(['{"type":"stored","at":5}'], ["T@0@0", "T@0@0"], "stored", 5)
    record = texts.record()
    assert orjson.loads(record.body) == {"v": 1, "events": [{"type": "stored", "at": 5}]}
    assert record.properties[PROPERTY_KEYS] == "T@0@0"
    assert (record.topic, record.properties[PROPERTY_TAGS]) == (TRACE_TOPIC, "stored")

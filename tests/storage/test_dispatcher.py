"""dispatcher: what a record's dispatch makes visible (unit, index key, arrival notice)."""

from __future__ import annotations

import pytest

from storage import MessageStore
from storage.delay_levels import SCHEDULE_TOPIC
from storage.index_file import index_key_hash
from storage.index_service import idempotency_index_key, idempotency_key_hash
from storage.record.java_hash import tags_code
from storage.record.layout import TRANSACTION_PREPARED_TYPE
from storage.record.message import Message
from storage.store_types import DispatchRequest
from storage.topic_names import TRANS_HALF_TOPIC
from tests.storage.conftest import message


def test_a_record_read_back_gives_the_request_its_append_gave(store: MessageStore) -> None:
    sent = message(tags="TagA", keys="k1 k2", UNIQ_KEY="U1", IDEMPOTENCY_KEY="order-17")
    result = store.put([sent])[0]
    data = store.commit_log.read_record(result.physical_offset)
    assert data is not None
    request = store.dispatcher.request_from_record(result.physical_offset, data)
    assert (request.topic, request.queue_id, request.queue_offset) == ("TopicA", 0, 0)
    assert (request.physical_offset, request.size) == (result.physical_offset, result.size)
    assert request.tags_code == tags_code("TagA")
    assert (request.keys, request.uniq_key) == ("k1 k2", "U1")
    # The index hash of its key: that of the joined index key, as a look-up hashes it.
    assert request.idempotency_hash == idempotency_key_hash("TopicA", "order-17")
    assert request.idempotency_hash == index_key_hash(idempotency_index_key("TopicA", "order-17"))
    assert request.store_timestamp == result.store_timestamp


def test_in_the_schedule_topic_the_tags_code_is_the_delivery_time(store: MessageStore) -> None:
    result = store.put([message(tags="TagA", DELAY="2")])[0]  # level 2: 5 s
    unit = store.find_consume_queue(SCHEDULE_TOPIC, 1)
    assert unit is not None
    assert unit.get_unit(0) == (result.physical_offset, result.size, result.store_timestamp + 5000)


def test_a_prepared_half_gets_no_unit_and_no_notice(store: MessageStore) -> None:
    notices: list[tuple[str, int, int, int]] = []
    store.arrival_listeners.append(lambda *notice: notices.append(notice))
    store.put([Message("TopicA", b"half", sys_flag=TRANSACTION_PREPARED_TYPE)])
    store.put([message(tags="TagA")])
    assert store.max_offset_in_queue("TopicA", 0) == 1
    assert notices == [("TopicA", 0, 1, tags_code("TagA"))]


def test_a_batch_is_announced_once_per_tags_code(store: MessageStore) -> None:
    notices: list[tuple[str, int, int, int]] = []
    store.arrival_listeners.append(lambda *notice: notices.append(notice))
    store.put([message(tags=tag) for tag in ("a", "b", "a", "a")])
    assert notices == [("TopicA", 0, 4, tags_code("a")), ("TopicA", 0, 4, tags_code("b"))]
    assert store.dispatched_offset == store.max_physical_offset


def test_half_messages_are_not_indexed_alone_or_in_a_batch(store: MessageStore) -> None:
    store.put([message(TRANS_HALF_TOPIC, keys="order-1", UNIQ_KEY="H1")])
    store.put([message(TRANS_HALF_TOPIC, keys="order-2", UNIQ_KEY=f"H2{n}") for n in range(2)])
    store.put([message(keys="order-1", UNIQ_KEY="U1")])
    assert store.query_message(TRANS_HALF_TOPIC, "order-1", 8) == []
    assert store.query_message(TRANS_HALF_TOPIC, "H1", 8) == []
    assert store.query_message(TRANS_HALF_TOPIC, "order-2", 8) == []
    assert [m.uniq_key for m in store.query_message("TopicA", "order-1", 8)] == ["U1"]
    assert store.max_offset_in_queue(TRANS_HALF_TOPIC, 0) == 3  # units still written


@pytest.mark.parametrize("delay", [None, "2"])
def test_a_keyed_append_gives_the_index_hash_its_record_gives(
    store: MessageStore, monkeypatch: pytest.MonkeyPatch, delay: str | None
) -> None:
    """An append hashes its key in its scope (a delayed message's REAL_TOPIC) as recovery
    does from the record read back: the same entry either way."""
    dispatched: list[DispatchRequest] = []
    dispatch = store.dispatcher.dispatch

    def heard(request: DispatchRequest, notify: bool) -> bool:
        dispatched.append(request)
        return dispatch(request, notify)

    monkeypatch.setattr(store.dispatcher, "dispatch", heard)
    sent = message(IDEMPOTENCY_KEY="order-17")
    if delay is not None:
        sent.properties["DELAY"] = delay
    result = store.put([sent])[0]
    [request] = dispatched
    assert request.topic == ("TopicA" if delay is None else SCHEDULE_TOPIC)
    assert request.idempotency_hash == idempotency_key_hash("TopicA", "order-17")
    data = store.commit_log.read_record(result.physical_offset)
    assert data is not None
    assert store.dispatcher.request_from_record(result.physical_offset, data) == request

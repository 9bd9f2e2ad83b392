"""store_check: a healthy store reports nothing; a bad unit is found, and cut with ``fix``."""

from __future__ import annotations

from storage import MessageStore
from storage.record.layout import CQ_UNIT_STRUCT
from tests.storage.conftest import OpenStore, message


def test_a_unit_pointing_at_another_record_is_reported_and_cut(open_store: OpenStore) -> None:
    store = open_store()
    for index in range(5):
        store.put([message(body=f"m{index}".encode())])
    assert store.check() == []
    queue = store.find_consume_queue("TopicA", 0)
    assert queue is not None
    third = queue.get_unit(2)
    assert third is not None
    wrong = CQ_UNIT_STRUCT.pack(third[0] + 1, third[1], third[2])  # one byte into the record
    mapped = queue.queue.files[0]
    mapped.buffer[2 * 20 : 3 * 20] = wrong
    problems = store.check()
    assert len(problems) == 1 and "consumequeue TopicA/0: unit 2" in problems[0]
    store.check(fix=True)
    assert store.max_offset_in_queue("TopicA", 0) == 2
    assert [p for p in store.check() if "unit" in p] == []


def test_an_implausible_checkpoint_time_is_reported(store: MessageStore) -> None:
    assert store.checkpoint is not None
    store.checkpoint.logics_msg_timestamp = -5
    assert store.check() == ["checkpoint logicsMsgTimestamp -5 is not a plausible time"]

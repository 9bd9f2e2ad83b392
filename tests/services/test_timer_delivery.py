"""What a fired timer record becomes: its real topic with its properties, or one roll more;
and the keys cancels match on."""

from __future__ import annotations

from services.timer.delivery import due_message, marker_key, rolled_message, target_key
from storage import StoredMessage
from storage.timer import TIMER_TOPIC


def record(**properties: str) -> StoredMessage:
    return StoredMessage(
        topic=TIMER_TOPIC,
        queue_id=0,
        queue_offset=7,
        physical_offset=1234,
        size=200,
        body=b"pay",
        properties=properties,
        flag=3,
        sys_flag=0,
        body_crc=0,
        born_timestamp=111,
        born_host=("10.0.0.1", 5000),
        store_timestamp=222,
        store_host=("127.0.0.1", 10911),
        reconsume_times=0,
        prepared_transaction_offset=0,
    )


TIMED = record(REAL_TOPIC="Orders", REAL_QID="2", UNIQ_KEY="K", TIMER_OUT_MS="5000", color="red")


def test_a_due_record_goes_back_to_its_topic_with_its_properties() -> None:
    message = due_message(TIMED, 9999)
    assert message is not None
    assert (message.topic, message.queue_id, message.body, message.flag) == ("Orders", 2, b"pay", 3)
    assert message.born_timestamp == 111
    assert message.properties == {
        "UNIQ_KEY": "K",
        "TIMER_OUT_MS": "5000",  # keeps it from being timed again
        "color": "red",
        "TIMER_DEQUEUE_MS": "9999",
    }
    assert due_message(record(UNIQ_KEY="K"), 1) is None


def test_a_rolled_record_goes_to_the_timer_topic_again() -> None:
    once = rolled_message(TIMED)
    assert (once.topic, once.queue_id) == (TIMER_TOPIC, 0)
    assert once.properties["TIMER_ROLL_TIMES"] == "1"
    assert once.properties["REAL_TOPIC"] == "Orders"


def test_cancel_keys() -> None:
    assert target_key(TIMED) == "Orders+K"
    assert marker_key(record(TIMER_DEL_UNIQKEY="Orders+K")) == "Orders+K"
    assert target_key(record()) is None

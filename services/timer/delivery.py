"""What a fired timer record becomes (RocketMQ's ``TimerMessageStore.convertMessage``).

- A due record goes back to ``REAL_TOPIC``/``REAL_QID`` with its body, flags, born time and
  properties (``REAL_TOPIC``/``REAL_QID`` removed, ``TIMER_DEQUEUE_MS`` added); the put
  gives it a fresh store time. ``TIMER_OUT_MS`` stays: it marks the message as timed
  already, so the put path never times it again.
- A rolled record (due beyond the roll window) is put to the timer topic again with
  ``TIMER_ROLL_TIMES`` + 1, and is placed anew.
"""

from __future__ import annotations

from storage import Message, StoredMessage
from storage.record.properties import (
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_KEY,
)
from storage.timer import TIMER_TOPIC, cancel_key


def target_key(record: StoredMessage) -> str | None:
    """The key a cancel marker names this record by; None when it has no real topic."""
    real_topic = record.properties.get(PROPERTY_REAL_TOPIC)
    uniq_key = record.properties.get(PROPERTY_UNIQ_KEY)
    if not real_topic or not uniq_key:
        return None
    return cancel_key(real_topic, uniq_key)


def marker_key(record: StoredMessage) -> str | None:
    """The key a cancel marker cancels."""
    return record.properties.get(PROPERTY_TIMER_DEL_UNIQKEY)


def due_message(record: StoredMessage, now_ms: int) -> Message | None:
    """The message to deliver for a fired timer record; None if it has no real topic."""
    properties = record.properties
    real_topic = properties.get(PROPERTY_REAL_TOPIC)
    real_queue = properties.get(PROPERTY_REAL_QID, "0")
    if not real_topic or not real_queue.isdigit():
        return None
    kept = {
        name: value
        for name, value in properties.items()
        if name not in (PROPERTY_REAL_TOPIC, PROPERTY_REAL_QID)
    }
    kept[PROPERTY_TIMER_DEQUEUE_MS] = str(now_ms)
    return _copy(record, real_topic, int(real_queue), kept)


def rolled_message(record: StoredMessage) -> Message:
    """The record put to the timer topic again, one roll more."""
    properties = dict(record.properties)
    properties[PROPERTY_TIMER_ROLL_TIMES] = str(
        int(properties.get(PROPERTY_TIMER_ROLL_TIMES, "0") or 0) + 1
    )
    return _copy(record, TIMER_TOPIC, 0, properties)


def _copy(record: StoredMessage, topic: str, queue_id: int, properties: dict[str, str]) -> Message:
    return Message(
        topic=topic,
        body=record.body,
        queue_id=queue_id,
        properties=properties,
        flag=record.flag,
        sys_flag=record.sys_flag,
        born_timestamp=record.born_timestamp,
        born_host=record.born_host,
        reconsume_times=record.reconsume_times,
    )

"""Delay levels: RocketMQ's ``messageDelayLevel`` table and the schedule topic.

A message with ``DELAY`` = level > 0 is stored in ``SCHEDULE_TOPIC_XXXX``, queue
``level - 1`` (``redirect_delayed``, on the put path); that queue's tags code is the
delivery time, not a tag hash.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from storage.errors import MessageRejectedError
from storage.record.layout import is_dispatchable
from storage.record.message import Message
from storage.record.properties import PROPERTY_DELAY, PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC

SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
DEFAULT_DELAY_LEVELS: Final = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
_UNITS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> tuple[int, ...]:
    """Milliseconds of each level, level 1 first.

    >>> parse_delay_levels("1s 5s 2m 1h")
    (1000, 5000, 120000, 3600000)
    """
    levels = []
    for item in text.split():
        unit = item[-1:]
        if unit not in _UNITS or not item[:-1].isdigit():
            raise ValueError(f"bad delay level {item!r}: use a number and s, m, h or d, e.g. 10s")
        levels.append(int(item[:-1]) * _UNITS[unit])
    if not levels:
        raise ValueError("the delay level table is empty")
    return tuple(levels)


def delay_level_to_queue_id(level: int) -> int:
    return level - 1


def queue_id_to_delay_level(queue_id: int) -> int:
    return queue_id + 1


def deliver_timestamp(levels: tuple[int, ...], level: int, store_timestamp: int) -> int:
    """When a message stored at ``store_timestamp`` with ``level`` is due (unknown level: +1 s)."""
    if 1 <= level <= len(levels):
        return store_timestamp + levels[level - 1]
    return store_timestamp + 1000


def redirect_delayed(message: Message, levels: tuple[int, ...]) -> Message:
    """A message with ``DELAY`` > 0 goes to the schedule topic, queue ``level - 1``,
    remembering its real topic and queue (reference §8). The level is clamped to the
    table; transaction halves are never delayed."""
    delay = message.properties.get(PROPERTY_DELAY)
    if delay is None or message.topic == SCHEDULE_TOPIC:
        return message
    if not is_dispatchable(message.sys_flag):
        return message
    try:
        level = int(delay)
    except ValueError:
        raise MessageRejectedError(f"DELAY must be a delay level, not {delay!r}") from None
    if level <= 0:
        return message
    level = min(level, len(levels))
    properties = dict(message.properties)
    properties[PROPERTY_DELAY] = str(level)
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QID] = str(message.queue_id)
    return dataclasses.replace(
        message,
        topic=SCHEDULE_TOPIC,
        queue_id=delay_level_to_queue_id(level),
        properties=properties,
    )

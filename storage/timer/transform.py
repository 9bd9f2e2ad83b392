"""The put path of a timer message (RocketMQ's ``HookUtils.handleScheduleMessage``).

A message with ``TIMER_DELIVER_MS`` (absolute ms), ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC``
(relative; that order of precedence, seconds first) due in the future is stored under
:data:`TIMER_TOPIC`, queue 0, with ``REAL_TOPIC``/``REAL_QID`` and ``TIMER_OUT_MS``: the
delivery time rounded *down* to the wheel's precision, one precision earlier on an exact
multiple. The slot of ``TIMER_OUT_MS`` fires once a whole precision has passed after it, so
a message is never delivered before its time and at most one precision (plus the work) after.

A message with a delay level keeps RocketMQ 4's path (its TIMER_* properties are dropped); a
transaction half is never timed. A message already due is stored as it is. A cancel marker
(``TIMER_DEL_UNIQKEY``) takes the same path and lands in the same slot as its target.

The ConsumeQueue of the timer topic holds ``TIMER_OUT_MS`` as the tags code — negated for a
cancel marker — so the wheel is filled from the ConsumeQueue alone (:func:`timer_tags_code`).
"""

from __future__ import annotations

import dataclasses
from typing import Final

from storage.errors import TimerMessageIllegalError, TimerNotEnabledError
from storage.record.layout import is_dispatchable
from storage.record.message import Message
from storage.record.properties import (
    PROPERTY_DELAY,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
)
from storage.timer.config import TimerConfig

TIMER_TOPIC: Final = "rmq_sys_wheel_timer"
TIMER_QUEUE_ID: Final = 0
_REQUESTS: Final = frozenset(
    (PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELIVER_MS)
)


def is_timer_request(properties: dict[str, str]) -> bool:
    """Whether a message asks for a delivery time."""
    return not _REQUESTS.isdisjoint(properties)  # one C call: runs for every message put


def cancel_key(real_topic: str, uniq_key: str) -> str:
    """What a cancel marker's ``TIMER_DEL_UNIQKEY`` holds: ``<realTopic>+<uniqKey>``."""
    return f"{real_topic}+{uniq_key}"


def is_cancel_marker(properties: dict[str, str]) -> bool:
    return PROPERTY_TIMER_DEL_UNIQKEY in properties


def deliver_ms_of(properties: dict[str, str], now_ms: int) -> int:
    """The delivery time a message asks for (DELAY_SEC > DELAY_MS > DELIVER_MS)."""
    for name, scale, relative in (
        (PROPERTY_TIMER_DELAY_SEC, 1000, True),
        (PROPERTY_TIMER_DELAY_MS, 1, True),
        (PROPERTY_TIMER_DELIVER_MS, 1, False),
    ):
        value = properties.get(name)
        if value is None:
            continue
        try:
            number = int(value)
        except ValueError:
            raise TimerMessageIllegalError(
                f"{name} must be a whole number, not {value!r}"
            ) from None
        return now_ms + number * scale if relative else number
    raise TimerMessageIllegalError("the message asks for no delivery time")


def fire_time(deliver_ms: int, precision_ms: int) -> int:
    """``TIMER_OUT_MS``: the start of the slot that fires at or just after ``deliver_ms``.

    >>> fire_time(61_500, 1000), fire_time(61_000, 1000), fire_time(61_050, 100)
    (61000, 60000, 61000)
    """
    out = deliver_ms // precision_ms * precision_ms
    return out - precision_ms if out == deliver_ms else out


def redirect_timer(
    message: Message, now_ms: int, config: TimerConfig, *, force: bool = False
) -> Message:
    """``message`` as it is stored: under the timer topic when it is due in the future.

    ``force``: a message already due, or not timed at all, goes through the wheel too (it
    fires at once) — for a timed batch, whose messages must all land in one queue.
    """
    properties = message.properties
    if message.topic == TIMER_TOPIC or PROPERTY_TIMER_OUT_MS in properties:
        return message  # timed already (a roll, a replica, a delivered message)
    requested = is_timer_request(properties)
    if not (requested or force) or not is_dispatchable(message.sys_flag):
        return message
    if properties.get(PROPERTY_DELAY, "0") not in ("", "0"):
        stripped = {k: v for k, v in properties.items() if k not in _REQUESTS}
        return dataclasses.replace(message, properties=stripped)  # a delay level wins
    if not config.enabled:
        raise TimerNotEnabledError("timer messages are not enabled on this broker")
    deliver = deliver_ms_of(properties, now_ms) if requested else now_ms
    marker = is_cancel_marker(properties)
    if deliver <= now_ms:
        if marker:
            raise TimerMessageIllegalError("the message to cancel was due already")
        if not force:
            return message
        deliver = now_ms
    if deliver - now_ms > config.max_delay_s * 1000:
        raise TimerMessageIllegalError(
            f"a message can be timed at most {config.max_delay_s} s ahead, "
            f"not {(deliver - now_ms) / 1000:.3f} s"
        )
    timed = dict(properties)
    timed[PROPERTY_TIMER_OUT_MS] = str(fire_time(deliver, config.precision_ms))
    timed[PROPERTY_REAL_TOPIC] = message.topic
    timed[PROPERTY_REAL_QID] = str(message.queue_id)
    return dataclasses.replace(
        message, topic=TIMER_TOPIC, queue_id=TIMER_QUEUE_ID, properties=timed
    )


def timer_tags_code(properties: dict[str, str]) -> int:
    """The tags code of a timer-topic unit: ``TIMER_OUT_MS``, negated for a cancel marker
    (0 when it is missing: such a record is delivered at once)."""
    value = properties.get(PROPERTY_TIMER_OUT_MS, "")
    out = int(value) if value.isdigit() else 0
    return -out if PROPERTY_TIMER_DEL_UNIQKEY in properties else out

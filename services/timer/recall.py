"""Cancelling a timer message (RocketMQ 5.3's recall): the answer, the cancel marker that is
stored for it, and the look-up of the record a handle names.

A cancel marker is a timer-topic record with ``TIMER_DEL_UNIQKEY`` = ``<realTopic>+<uniqKey>``
whose ``TIMER_OUT_MS`` is its target's: it lands in the target's slot, and when that slot
fires the target is dropped. The marker is built timed already, so that it is stored even as
the slot is about to fire (a producer's marker due now would be refused).
"""

from __future__ import annotations

import dataclasses
import time
from enum import Enum
from typing import Final

from services.timer.handles import TimerHandle
from storage import Message, MessageStore, StoredMessage
from storage.record.properties import (
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
)
from storage.timer import TIMER_TOPIC
from storage.timer.transform import TIMER_QUEUE_ID

RECALL_TAG: Final = "_RECALL_TAG_"


class CancelOutcome(Enum):
    CANCELLED = "cancelled"  # it will never be delivered
    ALREADY_CANCELLED = "already_cancelled"  # an earlier cancel did it


@dataclasses.dataclass(frozen=True, slots=True)
class CancelResult:
    outcome: CancelOutcome
    topic: str
    uniq_key: str
    fire_ms: int


def cancel_marker(topic: str, handle: TimerHandle, key: str, slot: int) -> Message:
    """The cancel marker of the message ``handle`` names (``key``: its cancel key), timed for
    ``slot``."""
    return Message(
        TIMER_TOPIC,
        b"0",
        queue_id=TIMER_QUEUE_ID,
        properties={
            PROPERTY_TIMER_DELIVER_MS: str(handle.deliver_ms),
            PROPERTY_TIMER_OUT_MS: str(slot),
            PROPERTY_REAL_TOPIC: topic,
            PROPERTY_REAL_QID: "0",
            PROPERTY_TIMER_DEL_UNIQKEY: key,
            PROPERTY_UNIQ_KEY: handle.uniq_key,
            PROPERTY_TAGS: RECALL_TAG,
        },
        born_timestamp=int(time.time() * 1000),
    )


def find_timer_record(
    store: MessageStore, topic: str, uniq_key: str
) -> tuple[StoredMessage | None, bool]:
    """The timer record with ``uniq_key`` sent to ``topic``, and whether a cancel marker for
    it was stored."""
    target = None
    marked = False
    for record in store.query_message(TIMER_TOPIC, uniq_key, max_num=64):
        properties = record.properties
        if properties.get(PROPERTY_TIMER_DEL_UNIQKEY):
            marked = marked or properties.get(PROPERTY_REAL_TOPIC) == topic
        elif properties.get(PROPERTY_REAL_TOPIC) == topic:
            target = record
    return target, marked

"""The records of a transaction, as RocketMQ writes them (``TransactionalMessageBridge``).

- **Half message:** the producer's message moved to ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0
  with ``TRAN_MSG``, ``PGROUP``, ``REAL_TOPIC``, ``REAL_QID`` and ``__transactionId__`` (the
  ``UNIQ_KEY``); its sysflag is NOT_TYPE so the half topic's ConsumeQueue indexes it.
- **Check copy:** at each check-back the half is appended again to the half queue with the
  check counter (``TRANSACTION_CHECK_TIMES``) and the original half's queue offset
  (``TRAN_PREPARED_QUEUE_OFFSET``); its prepared-transaction offset field holds the original
  half's CommitLog offset. The counter survives a restart this way.
- **Real message:** on commit, the half rebuilt in its real topic and queue with sysflag
  COMMIT, the half's store time and its CommitLog offset as prepared-transaction offset.
- **A delay or a delivery time** waits for the commit. The half keeps it under names the
  store does not act on (``TRAN_DELAY``, ``TRAN_TIMER_DELAY_MS``, ``TRAN_TIMER_DELIVER_MS``);
  the committed message gets it back (``DELAY``, ``TIMER_DELAY_MS``, ``TIMER_DELIVER_MS``)
  and its put takes the schedule or timer path then, as RocketMQ 5 routes a committed
  message that carries ``TIMER_*`` properties to ``rmq_sys_wheel_timer``. So a delay level
  and ``deliver_after_ms`` count from the commit; ``deliver_at`` is a time (one passed by the
  commit delivers at once).
- **Op record:** ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``, the ended halves' queue
  offsets in the body (``17,18,21,``). Beyond RocketMQ, ``TRAN_END`` says how they ended.
- **Check-max copy:** a half checked ``check_max`` times, copied to
  ``TRANS_CHECK_MAX_TIME_TOPIC`` queue 0 in its real topic's name.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from storage import Message, StoredMessage
from storage.record.layout import TRANSACTION_COMMIT_TYPE, TRANSACTION_TYPE_MASK
from storage.record.properties import (
    PROPERTY_DELAY,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_DELAY,
    PROPERTY_TRANSACTION_END,
    PROPERTY_TRANSACTION_ID,
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_TRANSACTION_TIMER_DELAY_MS,
    PROPERTY_TRANSACTION_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_KEY,
    shown_properties,
)
from storage.topic_names import (
    TRANS_CHECK_MAX_TIME_TOPIC,
    TRANS_HALF_TOPIC,
    TRANS_OP_HALF_TOPIC,
)

HALF_QUEUE_ID: Final = 0
"""RocketMQ puts every half message in queue 0 of the half topic."""
OP_QUEUE_ID: Final = 0
CHECK_MAX_QUEUE_ID: Final = 0
TRANSACTION_GROUP: Final = "CID_RMQ_SYS_TRANS"
"""The system group the broker reads its transaction topics as (``MixAll.CID_SYS_RMQ_TRANS``)."""
REMOVE_TAG: Final = "d"
OFFSET_SEPARATOR: Final = ","
END_COMMIT: Final = "COMMIT"
END_ROLLBACK: Final = "ROLLBACK"
TIMER_KEPT: Final = {
    PROPERTY_TRANSACTION_TIMER_DELAY_MS: PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TRANSACTION_TIMER_DELIVER_MS: PROPERTY_TIMER_DELIVER_MS,
}
"""A half's kept delivery time: its name on the half, its name on the committed message."""

_HALF_ONLY: Final = (
    PROPERTY_TRANSACTION_PREPARED,
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QID,
    PROPERTY_TRANSACTION_CHECK_TIMES,
    PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET,
    PROPERTY_TRANSACTION_DELAY,
    *TIMER_KEPT,
)
"""What the half carries that the committed message does not."""


def half_message(
    message: Message,
    producer_group: str,
    *,
    deliver_at: int | None = None,
    deliver_after_ms: int | None = None,
) -> Message:
    """``message`` (built for its real topic and queue) turned into its half message.

    A delay level, ``deliver_at`` or ``deliver_after_ms`` waits for the commit: kept as
    ``TRAN_DELAY``, ``TRAN_TIMER_DELIVER_MS`` or ``TRAN_TIMER_DELAY_MS``, so the store does
    not start it at the half send (see the module docstring).
    """
    properties = message.properties
    delay = properties.pop(PROPERTY_DELAY, None)
    if delay is not None:
        properties[PROPERTY_TRANSACTION_DELAY] = delay
    if deliver_at is not None:
        properties[PROPERTY_TRANSACTION_TIMER_DELIVER_MS] = str(deliver_at)
    elif deliver_after_ms:
        properties[PROPERTY_TRANSACTION_TIMER_DELAY_MS] = str(deliver_after_ms)
    properties[PROPERTY_TRANSACTION_PREPARED] = "true"
    properties[PROPERTY_PRODUCER_GROUP] = producer_group
    properties[PROPERTY_REAL_TOPIC] = message.topic
    properties[PROPERTY_REAL_QID] = str(message.queue_id)
    properties[PROPERTY_TRANSACTION_ID] = properties[PROPERTY_UNIQ_KEY]
    message.sys_flag &= ~TRANSACTION_TYPE_MASK  # NOT_TYPE: the half queue indexes it
    message.topic = TRANS_HALF_TOPIC
    message.queue_id = HALF_QUEUE_ID
    return message


def offered_properties(half: StoredMessage) -> dict[str, str]:
    """The properties a check shows the producer of ``half``: those it sent and RocketMQ's
    own (``PGROUP``, ``__transactionId__``, ...), without those the half alone carries and
    without the broker's bookkeeping."""
    return {k: v for k, v in shown_properties(half.properties).items() if k not in _HALF_ONLY}


def check_copy(half: StoredMessage, original_offset: int, origin: int, checks: int) -> Message:
    """The copy of a half appended at a check (``renewHalfMessageInner``)."""
    properties = dict(half.properties)
    properties[PROPERTY_TRANSACTION_CHECK_TIMES] = str(checks)
    properties[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(original_offset)
    return Message(
        TRANS_HALF_TOPIC,
        half.body,
        queue_id=HALF_QUEUE_ID,
        properties=properties,
        flag=half.flag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=origin,
    )


def real_message(half: Message | StoredMessage, origin: int, store_timestamp: int) -> Message:
    """The committed message: real topic and queue, sysflag COMMIT, the original half's
    CommitLog offset ``origin`` and its ``store_timestamp`` (a delayed or timed one is
    stored now: its delay starts at the commit)."""
    properties = dict(half.properties)
    topic = properties[PROPERTY_REAL_TOPIC]
    queue_id = int(properties[PROPERTY_REAL_QID])
    delay = properties.get(PROPERTY_TRANSACTION_DELAY)
    timer = [(name, properties[kept]) for kept, name in TIMER_KEPT.items() if kept in properties]
    for name in _HALF_ONLY:
        properties.pop(name, None)
    if delay is not None:
        properties[PROPERTY_DELAY] = delay
    properties.update(timer)
    return Message(
        topic,
        half.body,
        queue_id=queue_id,
        properties=properties,
        flag=half.flag,
        sys_flag=(half.sys_flag & ~TRANSACTION_TYPE_MASK) | TRANSACTION_COMMIT_TYPE,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_transaction_offset=origin,
        store_timestamp=0 if delay is not None or timer else store_timestamp,
    )


def check_max_copy(half: StoredMessage, original_offset: int, origin: int) -> Message:
    """The half copied to ``TRANS_CHECK_MAX_TIME_TOPIC`` once checked too often
    (``resolveDiscardMsg``); it still names its real topic, queue and producer group."""
    properties = dict(half.properties)
    properties[PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET] = str(original_offset)
    properties.pop(PROPERTY_TRANSACTION_PREPARED, None)  # a plain record of that topic
    return Message(
        TRANS_CHECK_MAX_TIME_TOPIC,
        half.body,
        queue_id=CHECK_MAX_QUEUE_ID,
        properties=properties,
        flag=half.flag,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        prepared_transaction_offset=origin,
    )


def op_message(half_offsets: Iterable[int], end: str) -> Message:
    """One op record for halves that ended the same way (``d``, offsets and commas)."""
    body = "".join(f"{offset}{OFFSET_SEPARATOR}" for offset in half_offsets)
    return Message(
        TRANS_OP_HALF_TOPIC,
        body.encode(),
        queue_id=OP_QUEUE_ID,
        properties={PROPERTY_TAGS: REMOVE_TAG, PROPERTY_TRANSACTION_END: end},
    )


def op_offsets(record: StoredMessage) -> list[int]:
    """The half offsets an op record ends; none for anything else (``fillOpRemoveMap``)."""
    if record.properties.get(PROPERTY_TAGS) != REMOVE_TAG:
        return []
    text = record.body.decode("utf-8", "replace")
    return [int(part) for part in text.split(OFFSET_SEPARATOR) if part.strip().isdigit()]


def op_end(record: StoredMessage) -> str:
    """How an op record's halves ended; RocketMQ's own (no ``TRAN_END``) count as rollbacks:
    whatever they committed is found by its copy in the real topic."""
    return record.properties.get(PROPERTY_TRANSACTION_END, END_ROLLBACK)


def original_offset(half: StoredMessage) -> int:
    """The half queue offset of the original half a half-topic record stands for."""
    value = half.properties.get(PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET)
    return int(value) if value is not None and value.isdigit() else half.queue_offset


def origin_offset(half: StoredMessage) -> int:
    """The CommitLog offset of the original half (a check copy points back at it)."""
    if PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET in half.properties:
        return half.prepared_transaction_offset
    return half.physical_offset


def check_times(half: StoredMessage) -> int:
    value = half.properties.get(PROPERTY_TRANSACTION_CHECK_TIMES, "0")
    return int(value) if value.isdigit() else 0

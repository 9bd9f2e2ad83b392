"""Message properties: RocketMQ's names (``MessageConst``) and the PROPERTIES field's text.

A record's properties are ``name\\x01value\\x02`` per entry, UTF-8, at most 32767 bytes
(the field's length is a short). Names beyond RocketMQ's are marked below; those that are the
broker's own bookkeeping are never shown to a reader (:func:`shown_properties`).
"""

from __future__ import annotations

from typing import Final

MAX_PROPERTIES_LENGTH: Final = 32767
NAME_VALUE_SEPARATOR: Final = "\x01"
PROPERTY_SEPARATOR: Final = "\x02"

# Property names (MessageConst).
PROPERTY_KEYS: Final = "KEYS"
PROPERTY_TAGS: Final = "TAGS"
PROPERTY_UNIQ_KEY: Final = "UNIQ_KEY"
PROPERTY_DELAY: Final = "DELAY"
PROPERTY_RETRY_TOPIC: Final = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC: Final = "REAL_TOPIC"
PROPERTY_REAL_QID: Final = "REAL_QID"
PROPERTY_ORIGIN_MESSAGE_ID: Final = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES: Final = "MAX_RECONSUME_TIMES"
# Transactional messages.
PROPERTY_TRANSACTION_PREPARED: Final = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP: Final = "PGROUP"
PROPERTY_TRANSACTION_ID: Final = "__transactionId__"
PROPERTY_TRANSACTION_CHECK_TIMES: Final = "TRANSACTION_CHECK_TIMES"
PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET: Final = "TRAN_PREPARED_QUEUE_OFFSET"
PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS: Final = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# Beyond RocketMQ: on an op record, how its half messages ended (COMMIT or ROLLBACK); on a
# half message, the delay level it is delivered with once committed.
PROPERTY_TRANSACTION_END: Final = "TRAN_END"
PROPERTY_TRANSACTION_DELAY: Final = "TRAN_DELAY"
# Beyond RocketMQ: on a half message, the delivery time it is delivered with once committed
# (``TIMER_DELAY_MS`` and ``TIMER_DELIVER_MS`` under names the store does not act on).
PROPERTY_TRANSACTION_TIMER_DELAY_MS: Final = "TRAN_TIMER_DELAY_MS"
PROPERTY_TRANSACTION_TIMER_DELIVER_MS: Final = "TRAN_TIMER_DELIVER_MS"
# RocketMQ 5's name; here, on a copy the POP revive service put into ``%RETRY%<group>``, which
# delivery it replaces (``<topic> <queue id> <offset> <ck id>``).
PROPERTY_POP_CK: Final = "POP_CK"
# Timer messages (RocketMQ 5): what a producer gives (an absolute time, or a delay in s or ms),
# and what the broker sets (the rounded fire time, when the message entered and left the
# wheel, how often it rolled, and on a cancel marker the key of the message it cancels).
PROPERTY_TIMER_DELIVER_MS: Final = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_SEC: Final = "TIMER_DELAY_SEC"
PROPERTY_TIMER_DELAY_MS: Final = "TIMER_DELAY_MS"
PROPERTY_TIMER_OUT_MS: Final = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS: Final = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS: Final = "TIMER_DEQUEUE_MS"
PROPERTY_TIMER_ROLL_TIMES: Final = "TIMER_ROLL_TIMES"
PROPERTY_TIMER_DEL_UNIQKEY: Final = "TIMER_DEL_UNIQKEY"
# Idempotent produce (beyond RocketMQ): the key a send was made with, and on the first record
# of a keyed send the fingerprint of its payload and, for a batch, how many records it holds.
PROPERTY_IDEMPOTENCY_KEY: Final = "IDEMPOTENCY_KEY"
PROPERTY_IDEMPOTENCY_FINGERPRINT: Final = "IDEMPOTENCY_FP"
PROPERTY_IDEMPOTENCY_BATCH: Final = "IDEMPOTENCY_BATCH"
IDEMPOTENCY_PROPERTIES: Final = (
    PROPERTY_IDEMPOTENCY_KEY,
    PROPERTY_IDEMPOTENCY_FINGERPRINT,
    PROPERTY_IDEMPOTENCY_BATCH,
)
"""The idempotency properties together: the broker stamps them, a producer may not set them."""
BOOKKEEPING_PROPERTIES: Final = frozenset(
    {
        *IDEMPOTENCY_PROPERTIES,
        PROPERTY_TRANSACTION_END,
        PROPERTY_TRANSACTION_DELAY,
        PROPERTY_TRANSACTION_TIMER_DELAY_MS,
        PROPERTY_TRANSACTION_TIMER_DELIVER_MS,
        PROPERTY_POP_CK,
    }
)
"""The broker's own bookkeeping, beyond RocketMQ: written into records for the broker to read
back (which put a key names, how a transaction ended or will be delivered, which delivery a
POP copy replaces), never shown to a reader -- a consumer, a lookup, the admin pages or the
Spark jobs (:func:`shown_properties`). A producer may not set them either."""
KEY_SEPARATOR: Final = " "
"""KEYS holds several business keys separated by spaces."""


def encode_properties(properties: dict[str, str]) -> bytes:
    """``name\\x01value\\x02`` per entry, with the trailing separator (RocketMQ ≤ 4.9.0, ≥ 5.2)."""
    text = ""
    for name, value in properties.items():  # a plain loop: faster than join for a few entries
        if value is not None:
            text += f"{name}\x01{value}\x02"
    return text.encode()


def decode_properties(data: bytes | bytearray | memoryview | str) -> dict[str, str]:
    """Parse properties; tolerates a missing trailing separator, drops empty names and values."""
    text = data if isinstance(data, str) else str(data, "utf-8", "replace")
    result: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        name, _, value = segment.partition(NAME_VALUE_SEPARATOR)
        if value and name:  # a value is only found after a separator
            result[name] = value
    return result


def shown_properties(properties: dict[str, str]) -> dict[str, str]:
    """``properties`` as every reader is shown them: without :data:`BOOKKEEPING_PROPERTIES`
    (the same dict when it holds none of them, as most records' properties do)."""
    if BOOKKEEPING_PROPERTIES.isdisjoint(properties):
        return properties
    return {name: value for name, value in properties.items() if name not in BOOKKEEPING_PROPERTIES}


def split_keys(keys: str | None) -> list[str]:
    """The business keys of a KEYS value, empty ones dropped."""
    return [key for key in keys.split(KEY_SEPARATOR) if key] if keys else []

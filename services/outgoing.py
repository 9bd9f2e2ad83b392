"""A message as a producer gives it, and the rules it must follow before anything is stored.

:class:`OutgoingMessage` is what every send takes (the HTTP routes, the CLI, transactional
half messages); :func:`check_message` refuses tags, keys and properties a record cannot hold
or that the broker keeps for itself (:data:`RESERVED_PROPERTIES`), and
:func:`deliver_time_of` tells when a timer message asks to be delivered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, NamedTuple

from services.errors import InvalidPropertyError
from storage.record.properties import (
    BOOKKEEPING_PROPERTIES,
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
)

RESERVED_PROPERTIES: Final = frozenset(
    {
        PROPERTY_TAGS,  # use the ``tags`` field
        PROPERTY_KEYS,  # use the ``keys`` field
        "DELAY",
        "REAL_TOPIC",
        "REAL_QID",
        "RETRY_TOPIC",
        "ORIGIN_MESSAGE_ID",
        "MAX_RECONSUME_TIMES",
        "TRAN_MSG",
        "PGROUP",
        "__transactionId__",
        "TRANSACTION_CHECK_TIMES",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "CHECK_IMMUNITY_TIME_IN_SECONDS",
        "MIN_OFFSET",
        "MAX_OFFSET",
        *BOOKKEEPING_PROPERTIES,  # the broker's own; for a key, use the Idempotency-Key header
        # use deliver_at / deliver_after_ms
        PROPERTY_TIMER_DELIVER_MS,
        PROPERTY_TIMER_DELAY_MS,
        PROPERTY_TIMER_DELAY_SEC,
        PROPERTY_TIMER_OUT_MS,
        PROPERTY_TIMER_ENQUEUE_MS,
        PROPERTY_TIMER_DEQUEUE_MS,
        PROPERTY_TIMER_ROLL_TIMES,
        PROPERTY_TIMER_DEL_UNIQKEY,
    }
)
"""Property names the broker sets or interprets; a producer may not set them directly."""

_FORBIDDEN_CHARS: Final = (NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR)

NO_PROPERTIES: Final[Mapping[str, str]] = MappingProxyType({})
"""The properties of a message that gives none (one shared, read-only mapping)."""


class OutgoingMessage(NamedTuple):
    """A message as a producer gives it (a NamedTuple: cheap to build per message)."""

    body: bytes
    tags: str | None = None
    keys: Sequence[str] = ()
    properties: Mapping[str, str] = NO_PROPERTIES
    queue_id: int | None = None  # explicit queue
    sharding_key: str | None = None  # same key, same queue
    delay_level: int = 0  # > 0: delivered after that level's delay (1s 5s 10s 30s 1m ...)
    deliver_after_ms: int | None = None  # a timer message: delivered this long after the send
    deliver_at: int | None = None  # a timer message: delivered at this time (ms since the epoch)


def check_message(message: OutgoingMessage) -> None:
    """Refuse tags, keys or properties that are empty, hold a record's separators, or that
    the broker keeps for itself (:class:`InvalidPropertyError`)."""
    if message.tags is None and not message.keys and not message.properties:
        return
    if message.tags is not None:
        _check_text("tags", message.tags)
        if "||" in message.tags:
            raise InvalidPropertyError("tags may not contain '||' (it separates tags in filters)")
    for key in message.keys:
        _check_text("a key", key)
        if KEY_SEPARATOR in key:
            raise InvalidPropertyError(f"a key may not contain a space: {key!r}")
    for name, value in message.properties.items():
        if name in RESERVED_PROPERTIES:
            raise InvalidPropertyError(f"property {name!r} is reserved for the broker")
        _check_text("a property name", name)
        _check_text(f"property {name!r}", value)


def deliver_time_of(message: OutgoingMessage, now_ms: int) -> int | None:
    """When a timer message asks to be delivered (ms since the epoch); None for any other."""
    if message.deliver_at is not None:
        if message.deliver_after_ms is not None:
            raise InvalidPropertyError("give deliver_at or deliver_after_ms, not both")
        if message.deliver_at < 0:
            raise InvalidPropertyError(f"deliver_at must be a time, not {message.deliver_at}")
        return message.deliver_at
    if message.deliver_after_ms is not None:
        if message.deliver_after_ms < 0:
            raise InvalidPropertyError(
                f"deliver_after_ms must be 0 or more, not {message.deliver_after_ms}"
            )
        return now_ms + message.deliver_after_ms if message.deliver_after_ms else None
    return None


def _check_text(what: str, value: str) -> None:
    if not value:
        raise InvalidPropertyError(f"{what} may not be empty")
    if any(char in value for char in _FORBIDDEN_CHARS):
        raise InvalidPropertyError(f"{what} may not contain the characters \\x01 or \\x02")

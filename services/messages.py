"""Look up messages: one by its offsetMsgId, those of a topic with a key or UNIQ_KEY, or a
page of one queue.

Browsing a queue reads the store directly, not through the pull service: looking at a queue
is not consuming it, so it counts no traffic and moves no offset.

Every message a reader is given leaves services through :func:`as_shown`: without the
broker's bookkeeping properties (pulls get their views so from the store, which applies the
same rule, :func:`~storage.record.properties.shown_properties`).
"""

from __future__ import annotations

import dataclasses
import string
import struct
from dataclasses import dataclass

from services.errors import InvalidMessageIdError, MessageNotFoundError
from services.topics import TopicService
from storage import MessageStore, StoredMessage
from storage.record.msg_id import decode_msg_id
from storage.record.properties import shown_properties
from storage.topic_names import TRACE_TOPIC

MAX_KEY_RESULTS = 64
"""The store's cap on one key query (RocketMQ's ``maxNum`` default)."""

_HEX = frozenset(string.hexdigits)
_READER = "spoolmq-browse"  # the group name a browse reads as (reads do not depend on it)
_READ_BATCH = 32


@dataclass(frozen=True, slots=True)
class QueuePage:
    """Messages of one queue from ``start`` on, oldest first."""

    messages: list[StoredMessage]
    more: bool  # the queue holds more messages after the last one (within the time bound)
    min_offset: int
    max_offset: int


def as_shown(message: StoredMessage) -> StoredMessage:
    """``message`` as a reader is shown it (a consumer, a lookup, the admin pages): without
    the broker's bookkeeping properties; the same object when it carries none."""
    properties = shown_properties(message.properties)
    if properties is message.properties:
        return message
    return dataclasses.replace(message, properties=properties)


def within_bytes(messages: list[StoredMessage], max_bytes: int | None) -> list[StoredMessage]:
    """The leading messages whose bodies fit in ``max_bytes``; the first one always (as a
    pull returns its first message even when it alone is over the cap)."""
    if max_bytes is None:
        return messages
    total = 0
    for count, message in enumerate(messages):
        total += len(message.body)
        if count and total > max_bytes:
            return messages[:count]
    return messages


class MessageQueryService:
    """Finds messages by their offsetMsgId (store host + port + commit log offset)."""

    def __init__(self, store: MessageStore, topics: TopicService) -> None:
        self._store = store
        self._topics = topics

    def by_key(
        self,
        topic: str,
        key: str,
        *,
        max_messages: int = 32,
        begin: int = 0,
        end: int | None = None,
        max_bytes: int | None = None,
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS holds ``key`` or whose UNIQ_KEY is ``key``.

        Stored between ``begin`` and ``end`` (ms, inclusive), oldest first, at most
        ``max_messages`` (64 at most). Found through the IndexFile; empty when it is off.
        """
        self._topics.get(topic)
        limit = max(1, min(max_messages, MAX_KEY_RESULTS))
        found = self._store.query_message(topic, key, limit, begin, end)[:limit]
        return within_bytes([as_shown(m) for m in found], max_bytes)

    def browse(
        self,
        topic: str,
        queue_id: int,
        start: int,
        limit: int,
        until_ms: int | None = None,
    ) -> QueuePage:
        """Up to ``limit`` messages of a queue from ``start`` (moved into the queue's range),
        stored at or before ``until_ms``; the topic must exist and have the queue."""
        config = self._topics.get(topic)
        self._topics.check_read_queue(config, queue_id)
        store = self._store
        low = store.min_offset_in_queue(topic, queue_id)
        high = store.max_offset_in_queue(topic, queue_id)
        start = min(max(start, low), high)
        found: list[StoredMessage] = []
        offset = start
        while offset < high:
            result = store.get_message(
                _READER, topic, queue_id, offset, min(_READ_BATCH, limit + 1)
            )
            for message in result.messages:
                if until_ms is not None and message.store_timestamp > until_ms:
                    return QueuePage(found, False, low, high)
                if len(found) == limit:
                    return QueuePage(found, True, low, high)
                found.append(as_shown(message))
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        return QueuePage(found, False, low, high)

    def by_id(self, msg_id: str) -> StoredMessage:
        """The message an offsetMsgId or a UNIQ_KEY names.

        Both are hex (a UNIQ_KEY has 32 characters, like an IPv4 offsetMsgId): the id is
        tried as an offsetMsgId of this broker first, then looked up as a UNIQ_KEY in the
        index of every topic; the first stored copy wins (retries keep the UNIQ_KEY).
        MessageNotFoundError when neither finds it.
        """
        if len(msg_id) not in (32, 56) or not _HEX.issuperset(msg_id):
            raise InvalidMessageIdError(
                f"a message id is 32 or 56 hex characters, not {msg_id[:64]!r}"
            )
        message = self._by_offset_id(msg_id)
        if message is None and len(msg_id) == 32:
            message = self._by_uniq_key(msg_id.upper())
        if message is None:
            raise MessageNotFoundError(f"message {msg_id} does not exist (or has expired)")
        return as_shown(message)

    def find(self, msg_id: str) -> StoredMessage | None:
        """:meth:`by_id` without its errors: None when the id names no stored message."""
        try:
            return self.by_id(msg_id)
        except (InvalidMessageIdError, MessageNotFoundError):
            return None

    def _by_offset_id(self, msg_id: str) -> StoredMessage | None:
        decoded = decode_msg_id(msg_id)
        store = self._store
        if (decoded.store_host, decoded.store_port) != store.config.store_host:
            return None
        if decoded.physical_offset < 0:
            return None
        try:
            return store.look_message_by_id(msg_id.upper())
        except (ValueError, struct.error, UnicodeDecodeError):
            return None  # the offset is not the start of a record

    def _by_uniq_key(self, uniq_key: str) -> StoredMessage | None:
        store = self._store
        found = [
            message
            for topic in store.topics()
            if topic != TRACE_TOPIC  # its records name the messages they trace
            for message in store.query_message(topic, uniq_key, 4)
            if message.uniq_key == uniq_key
        ]
        return min(found, key=lambda m: m.physical_offset, default=None)

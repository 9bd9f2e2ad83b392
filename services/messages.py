"""Look up messages: one by its offsetMsgId, or those of a topic with a key or UNIQ_KEY."""

from __future__ import annotations

import string
import struct

from services.errors import InvalidMessageIdError, MessageNotFoundError
from services.topics import TopicService
from storage import MessageStore, StoredMessage
from storage.codec import decode_msg_id

MAX_KEY_RESULTS = 64
"""The store's cap on one key query (RocketMQ's ``maxNum`` default)."""

_HEX = frozenset(string.hexdigits)


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
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS holds ``key`` or whose UNIQ_KEY is ``key``.

        Stored between ``begin`` and ``end`` (ms, inclusive), oldest first, at most
        ``max_messages`` (64 at most). Found through the IndexFile; empty when it is off.
        """
        self._topics.get(topic)
        limit = max(1, min(max_messages, MAX_KEY_RESULTS))
        return self._store.query_message(topic, key, limit, begin, end)[:limit]

    def by_id(self, msg_id: str) -> StoredMessage:
        """The message ``msg_id`` names; MessageNotFoundError when it is not (or no longer) here."""
        if len(msg_id) not in (32, 56) or not _HEX.issuperset(msg_id):
            raise InvalidMessageIdError(
                f"a message id is 32 or 56 hex characters, not {msg_id[:64]!r}"
            )
        decoded = decode_msg_id(msg_id)
        store = self._store
        if (decoded.store_host, decoded.store_port) != store.config.store_host:
            raise MessageNotFoundError(
                f"message {msg_id} was stored by {decoded.store_host}:{decoded.store_port}, "
                "not by this broker"
            )
        if decoded.physical_offset < 0:
            raise MessageNotFoundError(f"message {msg_id} does not exist")
        try:
            message = store.look_message_by_id(msg_id.upper())
        except (ValueError, struct.error, UnicodeDecodeError):
            message = None  # the offset is not the start of a record
        if message is None:
            raise MessageNotFoundError(f"message {msg_id} does not exist (or has expired)")
        return message

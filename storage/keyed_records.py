"""Records sent with an idempotency key: found through the index, read back from the CommitLog.

A keyed send stores its key (and on its first record the payload fingerprint and, for a batch,
the record count) as properties, and dispatch indexes the key under
:func:`~storage.index_service.idempotency_index_key`. The CommitLog stays the only truth:
the index is rebuilt from it after an unclean exit, and a slave builds its own from the bytes
it replicates. The index compares hashes only; every hit is re-checked on its record.
"""

from __future__ import annotations

from storage.commit_log import CommitLog
from storage.dispatcher import Dispatcher
from storage.index_service import IndexService, idempotency_key_hash, idempotency_scope
from storage.record.message import StoredMessage
from storage.record.properties import PROPERTY_IDEMPOTENCY_KEY


class KeyedRecords:
    """Look-ups of keyed records for the idempotency check (owner thread)."""

    def __init__(
        self, commit_log: CommitLog, dispatcher: Dispatcher, index: IndexService | None
    ) -> None:
        self._commit_log = commit_log
        self._dispatcher = dispatcher
        self._index = index

    @property
    def enabled(self) -> bool:
        """False when the store runs without an index: keys cannot be found."""
        return self._index is not None

    def covers(self, offset: int) -> bool:
        """Whether the index holds every record below CommitLog ``offset``: it is complete
        (caught up after an unclean exit) and dispatch has indexed up to there."""
        dispatcher = self._dispatcher
        return (
            self._index is not None
            and dispatcher.index_caught_up
            and dispatcher.index_reput_offset >= offset
        )

    def find(self, topic: str, key: str, since: int) -> StoredMessage | None:
        """The oldest record sent to ``topic`` with idempotency key ``key`` and stored at
        ``since`` (ms) or later; None when there is none, or its file has expired."""
        if self._index is None:
            return None
        offsets = self._index.lookup(idempotency_key_hash(topic, key), since)
        if not offsets:  # the common case: a new key
            return None
        commit_log = self._commit_log
        max_offset = commit_log.max_offset  # entries past it were truncated away
        for offset in sorted(o for o in set(offsets) if o < max_offset):
            message = commit_log.look_message(offset)
            if (
                message is not None
                and message.store_timestamp >= since
                and message.properties.get(PROPERTY_IDEMPOTENCY_KEY) == key
                and idempotency_scope(message.topic, message.properties) == topic
            ):
                return message
        return None

    def read_from(self, first: StoredMessage, count: int) -> list[StoredMessage]:
        """``first`` and the records right after it, ``count`` in all (fewer at the log's
        end): the records of one batch, which are always written back to back."""
        found = [first]
        offset = first.physical_offset + first.size
        while len(found) < count:
            message = self._commit_log.look_message(offset)
            if message is None:
                break
            found.append(message)
            offset += message.size
        return found

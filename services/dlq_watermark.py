"""How many of a group's dead letters still wait: the redrive watermark.

Dead letters are never removed (the log is append-only), so a redrive does what a consumer
of ``%DLQ%<group>`` would: it moves the group's offset on that queue past the dead letters
already redriven. What waits is then that queue's lag, defined once in
:func:`storage.lag_model.dlq_depth` for the API, the admin pages and the Spark lag report.
"""

from __future__ import annotations

from collections.abc import Callable

from services.send_back import dlq_topic
from storage import MessageStore, StoredMessage
from storage.config_managers import ConsumerOffsetManager
from storage.lag_model import DlqDepth, consume_position, dlq_depth

DLQ_QUEUE_ID = 0
_SCAN_BATCH = 64

IsRedriven = Callable[[StoredMessage], bool]
"""Whether a dead letter has been redriven (its copy found, or moved by the current run)."""


class DlqWatermark:
    """The group's offset on its DLQ queue: the oldest dead letter not redriven yet."""

    def __init__(self, store: MessageStore, offsets: ConsumerOffsetManager) -> None:
        self._store = store
        self._offsets = offsets

    def position(self, group: str) -> int:
        """The watermark: where the waiting dead letters begin."""
        topic = dlq_topic(group)
        committed = self._offsets.query_offset(group, topic, DLQ_QUEUE_ID)
        low = self._store.min_offset_in_queue(topic, DLQ_QUEUE_ID)
        return max(consume_position(committed, low), low)

    def depth(self, group: str) -> DlqDepth:
        topic = dlq_topic(group)
        return dlq_depth(
            self._offsets.query_offset(group, topic, DLQ_QUEUE_ID),
            self._store.min_offset_in_queue(topic, DLQ_QUEUE_ID),
            self._store.max_offset_in_queue(topic, DLQ_QUEUE_ID),
        )

    def advance(self, group: str, is_redriven: IsRedriven) -> None:
        """Move the watermark past every redriven dead letter at its head (never back)."""
        topic = dlq_topic(group)
        start = offset = self.position(group)
        high = self._store.max_offset_in_queue(topic, DLQ_QUEUE_ID)
        while offset < high:
            result = self._store.get_message(group, topic, DLQ_QUEUE_ID, offset, _SCAN_BATCH)
            waiting = next((m for m in result.messages if not is_redriven(m)), None)
            if waiting is not None:
                offset = waiting.queue_offset
                break
            if result.next_begin_offset <= offset:
                break
            offset = result.next_begin_offset
        if offset > start:
            self._offsets.commit_offset(group, topic, DLQ_QUEUE_ID, offset)

"""Taking messages from queues for a receive: the rotation, the pop offsets and FIFO's rules.

Everything here is synchronous (no await between reading a queue and advancing its pop
offset), so two concurrent receives never take the same message. A normal group reads each
queue from its pop offset. A FIFO group takes nothing from a queue while someone holds one of
its messages; once the held messages are due again (expired or given back) they come first,
from the same queue, with their attempt + 1, before anything after them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.consumer_filter import ConsumerFilter
from services.offsets import OffsetService
from services.pop.inflight import InFlightTable, QueueKey, QueueState
from services.send_back import RETRY_GROUP_TOPIC_PREFIX
from storage import GetMessageStatus, MessageStore, StoredMessage
from storage.config_managers import SubscriptionGroupConfig

_MOVED = frozenset({GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY})


@dataclass(slots=True)
class Take:
    """What one receive took from one queue, and each message's delivery attempt."""

    key: QueueKey
    messages: list[StoredMessage]
    attempts: list[int]


class QueueTaker:
    """Reads queues for receives and advances the pop offsets in the in-flight table."""

    def __init__(
        self,
        store: MessageStore,
        table: InFlightTable,
        offsets: OffsetService,
        moved: Callable[[QueueKey, QueueState], None],
    ) -> None:
        self._store = store
        self._table = table
        self._offsets = offsets
        self._moved = moved  # a pop offset moved without taking anything
        self._rotation: dict[tuple[str, str], int] = {}

    def take_round(
        self,
        group: SubscriptionGroupConfig,
        keys: list[tuple[str, int]],
        max_messages: int,
        max_bytes: int | None,
        wanted: ConsumerFilter,
    ) -> list[Take]:
        """Read each queue once, from a start that moves on every round, so none starves."""
        name = group.group_name
        rotation = (name, keys[0][0] if keys else "")
        first = self._rotation.get(rotation, 0) % max(1, len(keys))
        self._rotation[rotation] = first + 1
        takes: list[Take] = []
        left, budget = max_messages, max_bytes
        for topic, queue_id in keys[first:] + keys[:first]:
            if left <= 0 or (budget is not None and budget <= 0):
                break
            key = (name, topic, queue_id)
            state = self._queue_state(group, key)
            if group.fifo:
                take = self._take_fifo(key, state, left, budget, wanted)
            else:
                retry = topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                take = self._take_new(
                    key, state, left, budget, wanted.for_retries() if retry else wanted
                )
            if take is not None and take.messages:
                takes.append(take)
                left -= len(take.messages)
                if budget is not None:
                    budget -= sum(m.size for m in take.messages)
        return takes

    def message_at(self, key: QueueKey, offset: int) -> StoredMessage | None:
        """The message at a queue offset, or None when it has left the store."""
        result = self._store.get_message(key[0], key[1], key[2], offset, 1)
        found = result.messages
        if found and found[0].queue_offset == offset:
            return found[0]
        return None

    def _queue_state(self, group: SubscriptionGroupConfig, key: QueueKey) -> QueueState:
        state = self._table.queue(key)
        if state is None:  # first receive: where the group starts (consume_from)
            start = self._offsets.position(group, key[1], key[2])
            state = self._table.ensure(key, start)
        return state

    def _take_fifo(
        self,
        key: QueueKey,
        state: QueueState,
        left: int,
        budget: int | None,
        wanted: ConsumerFilter,
    ) -> Take | None:
        if state.held():
            return None
        ready = state.ready_entries()
        if not ready:
            return self._take_new(key, state, left, budget, wanted)
        messages: list[StoredMessage] = []
        attempts: list[int] = []
        for entry in ready[:left]:
            message = self.message_at(key, entry.offset)
            if message is None:  # it has expired from the store: nothing to deliver
                self._table.resolve(key, entry.offset, entry.ck_id)
                continue
            messages.append(message)
            attempts.append(entry.attempt + 1)
            entry.busy = True  # replaced by the receive's new CK; no revive meanwhile
        return Take(key, messages, attempts)

    def _take_new(
        self,
        key: QueueKey,
        state: QueueState,
        left: int,
        budget: int | None,
        wanted: ConsumerFilter,
    ) -> Take | None:
        group, topic, queue_id = key
        offset = state.pop_offset
        result = self._store.get_message(
            group,
            topic,
            queue_id,
            offset,
            left,
            budget,
            wanted.store_tags,
            property_filter=wanted.property_test,
        )
        messages = result.messages
        if messages and wanted.tags.tags is not None:
            # The store filtered by hash code; drop hash collisions by the exact tag.
            messages = [m for m in messages if wanted.keeps_tags(m.tags)]
        if result.status in _MOVED or result.next_begin_offset > offset:
            state.pop_offset = result.next_begin_offset
        if not messages:
            self._moved(key, state)
            return None
        return Take(key, messages, [m.reconsume_times + 1 for m in messages])

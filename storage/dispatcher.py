"""Dispatcher: makes appended records visible — ConsumeQueue unit, index entry, arrival
notice (RocketMQ's ``doDispatch`` and ``ReputMessageService``).

- ASYNC_FLUSH dispatches right after the append; SYNC_FLUSH keeps the request pending until
  the group commit has flushed it (``dispatch_pending``), so no consumer ever sees a message
  that a crash could take back.
- ``reput_from`` re-dispatches what the ConsumeQueues miss (on open, and after a ConsumeQueue
  or index file could not be written); dispatch is idempotent.
- A failure never goes unseen: it refuses writes (``Refusal.DISPATCH``, with the offset and
  the cause) so nothing more is acknowledged that no consumer could see, and
  ``reput_if_needed`` — on the next put, and from the broker's retry task — dispatches again
  from where it stopped; the refusal ends once dispatch has caught up.
- After an unclean exit the index is rebuilt by ``catch_up_index``; while it lags, dispatch
  leaves indexing to it.
- Half messages (and their check copies) are not indexed, unlike RocketMQ: nothing looks
  one up by key (a transaction is found by its id in the broker's table, a half by its
  CommitLog offset), and a lookup by key must not find a message its producer has not
  committed.
"""

from __future__ import annotations

import errno
from collections import deque

from storage.checkpoint import StoreCheckpoint
from storage.commit_log import AppendedBatch, AppendResult, CommitLog
from storage.consume_queue_table import ConsumeQueueTable
from storage.delay_levels import SCHEDULE_TOPIC, deliver_timestamp
from storage.index_service import IndexService, idempotency_key_hash, idempotency_scope
from storage.record.decode import RecordKind, decode_record
from storage.record.encode import EncodedMessage
from storage.record.java_hash import tags_code
from storage.record.layout import (
    DISPATCHABLE_TYPES,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from storage.record.properties import (
    PROPERTY_DELAY,
    PROPERTY_IDEMPOTENCY_KEY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
)
from storage.running_flags import Refusal, RunningFlags
from storage.store_types import ArrivalListener, DispatchRequest
from storage.timer.transform import TIMER_TOPIC, timer_tags_code
from storage.topic_names import TRANS_HALF_TOPIC


class Dispatcher:
    """CommitLog → ConsumeQueues (and index, and arrival listeners), on the owner thread."""

    def __init__(
        self,
        commit_log: CommitLog,
        table: ConsumeQueueTable,
        flags: RunningFlags,
        delay_levels: tuple[int, ...],
        arrival_listeners: list[ArrivalListener],
        checkpoint: StoreCheckpoint | None = None,
        index_service: IndexService | None = None,
        sync_flush: bool = False,
    ) -> None:
        self.commit_log = commit_log
        self.table = table
        self.flags = flags
        self.delay_levels = delay_levels
        self.arrival_listeners = arrival_listeners
        self.checkpoint = checkpoint
        self.index_service = index_service
        self.sync_flush = sync_flush
        # Everything below this CommitLog offset is dispatched.
        self.reput_from_offset = 0
        # The index is complete up to this CommitLog offset; while it lags behind the
        # dispatched offset, dispatch leaves indexing to catch_up_index().
        self.index_reput_offset = 0
        self.index_caught_up = False
        # A ConsumeQueue or index file could not be written: dispatch again from
        # reput_from_offset (reput_if_needed); failed_for_space: the cause was ENOSPC.
        self.needs_reput = False
        self.failed_for_space = False
        self.pending: deque[DispatchRequest | AppendedBatch] = deque()

    # ------------------------------------------------------------------ requests

    def request_from_record(self, physical_offset: int, data: bytes) -> DispatchRequest:
        """The request for a record read back from the CommitLog."""
        record = decode_record(data)
        properties = record.properties
        return DispatchRequest(
            record.topic,
            record.queue_id,
            physical_offset,
            record.size,
            self.tags_code_of(record.topic, properties, record.store_timestamp),
            record.store_timestamp,
            record.queue_offset,
            properties.get(PROPERTY_KEYS),
            properties.get(PROPERTY_UNIQ_KEY),
            record.sys_flag,
            _idempotency_hash(record.topic, properties),
        )

    def tags_code_of(self, topic: str, properties: dict[str, str], store_timestamp: int) -> int:
        """Tag hash, except in the schedule topic where it is the delivery time, and in the
        timer topic where it is the fire time (negated for a cancel marker)."""
        if topic == TIMER_TOPIC:
            return timer_tags_code(properties)
        if topic == SCHEDULE_TOPIC:
            delay = properties.get(PROPERTY_DELAY)
            if delay is not None and delay.lstrip("-").isdigit():
                return deliver_timestamp(self.delay_levels, int(delay), store_timestamp)
        return tags_code(properties.get(PROPERTY_TAGS))

    # ------------------------------------------------------------------ dispatch

    def dispatch_appended(self, encoded: EncodedMessage, result: AppendResult) -> None:
        """After an append: dispatch now (ASYNC_FLUSH) or once flushed (SYNC_FLUSH).

        The encoder already has the tags code, keys and uniq key of the properties.
        """
        topic = encoded.topic
        store_timestamp = result.store_timestamp
        plain = topic != SCHEDULE_TOPIC and topic != TIMER_TOPIC
        key = encoded.idempotency_key
        request = DispatchRequest(
            topic,
            encoded.queue_id,
            result.physical_offset,
            result.size,
            encoded.tags_code
            if plain
            else self.tags_code_of(topic, encoded.properties, store_timestamp),
            store_timestamp,
            result.queue_offset,
            encoded.keys,
            encoded.uniq_key,
            encoded.sys_flag,
            None
            if key is None
            else idempotency_key_hash(
                topic if plain else idempotency_scope(topic, encoded.properties), key
            ),  # = _idempotency_hash: a plain topic is its key's scope
        )
        if self.sync_flush:
            self.pending.append(request)
        elif not self.needs_reput and self.dispatch(request, notify=True):
            self.reput_from_offset = result.physical_offset + result.size

    def dispatch_appended_batch(self, batch: AppendedBatch) -> None:
        """After a batch append: dispatch it now (ASYNC_FLUSH) or once flushed (SYNC_FLUSH)."""
        if self.sync_flush:
            self.pending.append(batch)
        elif not self.needs_reput and self.dispatch_batch(batch, notify=True):
            self.reput_from_offset = batch.end_offset

    def dispatch_batch(self, batch: AppendedBatch, notify: bool) -> bool:
        """A batch's units in one ConsumeQueue write, its keys in one index loop, and one
        arrival notice per distinct tags code; False as :meth:`dispatch`."""
        topic, queue_id = batch.topic, batch.queue_id
        deleted = self.table.deleted_topics
        if deleted and batch.offsets[0] < deleted.get(topic, -1):
            return True  # records of a topic deleted since: never dispatched again
        queues = self.table.queues.get(topic)
        queue = queues.get(queue_id) if queues is not None else None
        if queue is None:
            queue = self.table.find_or_create(topic, queue_id)
        try:
            queue.put_units(batch.first_queue_offset, batch.units)
        except OSError as exc:
            self._dispatch_failed(exc, "a ConsumeQueue file", batch.offsets[0])
            return False
        store_timestamp = batch.store_timestamp
        queue.last_store_timestamp = store_timestamp
        if self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = store_timestamp
        index = self.index_service
        if index is not None and self.index_caught_up:
            try:
                if topic != TRANS_HALF_TOPIC:
                    index.build_index_batch(
                        topic,
                        batch.offsets,
                        store_timestamp,
                        batch.keys,
                        batch.uniq_keys,
                        batch.idempotency_keys,
                    )
            except OSError as exc:
                self._dispatch_failed(exc, "an index file", batch.offsets[0])
                return False
            self.index_reput_offset = batch.end_offset
        if notify and self.arrival_listeners:
            # Waiters filter by tags code: one notice per distinct code, once the whole
            # batch is in (the queue's max offset is the batch's end for every notice).
            max_offset = batch.first_queue_offset + len(batch.offsets)
            for code in dict.fromkeys(batch.tags_codes):
                for listener in self.arrival_listeners:
                    listener(topic, queue_id, max_offset, code)
        return True

    def dispatch(self, request: DispatchRequest, notify: bool) -> bool:
        """Index one record; False (store marked not writeable) when a file cannot be made."""
        topic = request.topic
        deleted = self.table.deleted_topics
        if deleted and request.physical_offset < deleted.get(topic, -1):
            return True  # a record of a topic deleted since: never dispatched again
        # = request.is_dispatchable, inlined: this runs for every record put
        dispatchable = request.sys_flag & TRANSACTION_TYPE_MASK in DISPATCHABLE_TYPES
        if dispatchable:
            queues = self.table.queues.get(topic)  # = table.find_or_create, inlined
            queue = queues.get(request.queue_id) if queues is not None else None
            if queue is None:
                queue = self.table.find_or_create(topic, request.queue_id)
            try:
                queue.put(
                    request.physical_offset, request.size, request.tags_code, request.queue_offset
                )
            except OSError as exc:
                self._dispatch_failed(exc, "a ConsumeQueue file", request.physical_offset)
                return False
            queue.last_store_timestamp = request.store_timestamp
            if self.checkpoint is not None:
                self.checkpoint.logics_msg_timestamp = request.store_timestamp
        if self.index_caught_up and self.index_service is not None:
            try:
                self._index(request)
            except OSError as exc:
                self._dispatch_failed(exc, "an index file", request.physical_offset)
                return False
        if notify and dispatchable and self.arrival_listeners:
            max_offset, code = request.queue_offset + 1, request.tags_code
            for listener in self.arrival_listeners:
                listener(topic, request.queue_id, max_offset, code)
        return True

    def _dispatch_failed(self, exc: OSError, what: str, physical_offset: int) -> None:
        space = exc.errno == errno.ENOSPC
        cause = "disk full" if space else (exc.strerror or str(exc))
        self.flags.refuse(
            Refusal.DISPATCH,
            f"dispatch stopped at CommitLog offset {physical_offset}: cannot write {what} "
            f"({cause}); it resumes from there once the file can be written",
        )
        self.needs_reput = True
        self.failed_for_space = space

    def dispatch_pending(self, up_to_offset: int) -> int:
        """Dispatch appended records that end at or below ``up_to_offset`` (SYNC_FLUSH)."""
        pending = self.pending
        count = 0
        while pending and pending[0].end_offset <= up_to_offset and not self.needs_reput:
            request = pending.popleft()
            if isinstance(request, AppendedBatch):
                dispatched = self.dispatch_batch(request, notify=True)
            else:
                dispatched = self.dispatch(request, notify=True)
            if not dispatched:
                pending.appendleft(request)
                break
            self.reput_from_offset = request.end_offset
            count += 1
        return count

    @property
    def dispatch_behind_bytes(self) -> int:
        return max(0, self.commit_log.max_offset - self.reput_from_offset)

    # ------------------------------------------------------------------ reput

    def reput_from(self, start: int, notify: bool = True, limit: int | None = None) -> bool:
        """Dispatch every record from ``start`` to the CommitLog's end (or to ``limit``: the
        flushed offset in SYNC_FLUSH); False when a file could not be written (dispatch
        stays where it stopped)."""
        offset = max(start, self.commit_log.min_offset, 0)
        for scanned in self.commit_log.scan(offset, limit):
            if scanned.check.kind is not RecordKind.MESSAGE:
                break
            request = self.request_from_record(scanned.offset, scanned.data)
            if not self.dispatch(request, notify=notify):
                self.reput_from_offset = offset
                self._drop_pending_below(offset)
                return False
            offset = request.end_offset
        self.reput_from_offset = (
            offset if limit is not None else max(offset, self.commit_log.max_offset)
        )
        self._drop_pending_below(self.reput_from_offset)
        return True

    def _drop_pending_below(self, offset: int) -> None:
        """Forget pending requests a reput has dispatched (they end at or below ``offset``)."""
        pending = self.pending
        while pending and pending[0].end_offset <= offset:
            pending.popleft()

    def reput_if_needed(self, limit: int | None = None) -> bool:
        """After a dispatch failure: dispatch what the ConsumeQueues miss, up to ``limit``
        (owner thread); True once caught up, which ends the dispatch refusal."""
        if not self.needs_reput:
            return True
        self.needs_reput = False
        if not self.reput_from(self.reput_from_offset, limit=limit):
            return False
        self.failed_for_space = False
        self.flags.clear(Refusal.DISPATCH)
        return True

    # ------------------------------------------------------------------ index

    def _index(self, request: DispatchRequest) -> None:
        index = self.index_service
        if index is None:
            return
        if (
            request.sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK_TYPE
            and request.topic != TRANS_HALF_TOPIC
        ):
            index.build_index(
                request.topic,
                request.physical_offset,
                request.store_timestamp,
                request.keys,
                request.uniq_key,
                request.idempotency_hash,
            )
        self.index_reput_offset = request.end_offset

    def start_index_catch_up(self) -> None:
        """Find where the index ends: after the record at its last physical offset."""
        index = self.index_service
        if index is None:
            return
        last = index.end_phy_offset
        start = max(last, self.commit_log.min_offset, 0)
        if last >= 0:
            record = self.commit_log.read_record(last)
            start = max(start, last + len(record)) if record is not None else start
        self.index_reput_offset = start
        self.index_caught_up = start >= self.reput_from_offset

    @property
    def index_behind_bytes(self) -> int:
        """How much dispatched CommitLog the index has not covered yet."""
        if self.index_service is None or self.index_caught_up:
            return 0
        return max(0, self.reput_from_offset - self.index_reput_offset)

    def catch_up_index(self, max_records: int | None = None) -> bool:
        """Index dispatched records the index lacks (owner thread); True once caught up."""
        if self.index_service is None or self.index_caught_up:
            return True
        target = self.reput_from_offset
        budget = max_records
        for scanned in self.commit_log.scan(self.index_reput_offset, target):
            if scanned.check.kind is not RecordKind.MESSAGE:
                break
            if budget is not None:
                if budget == 0:
                    return False
                budget -= 1
            self._index(self.request_from_record(scanned.offset, scanned.data))
        self.index_reput_offset = target
        self.index_caught_up = True
        return True


def _idempotency_hash(topic: str, properties: dict[str, str]) -> int | None:
    """The index hash of a record's idempotency key (:func:`idempotency_key_hash` in its
    scope), None when it has none."""
    key = properties.get(PROPERTY_IDEMPOTENCY_KEY)
    if key is None:
        return None
    return idempotency_key_hash(idempotency_scope(topic, properties), key)

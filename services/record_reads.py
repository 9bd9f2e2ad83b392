"""Range reads: one queue's records as the CommitLog stores them, up to a byte budget.

A scan's read (a Spark source's, ``GET /v1/topics/{t}/queues/{q}/records``) by the pull's rules
(:mod:`services.pull`): the topic's read permission, the tag and SQL92 filters (a group's stored
one too), the statuses, the long poll where nothing is there yet. A filtered read scans on past
what its filters skip while its wait lasts; it never reads past ``end_offset``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from services.consumer_filter import ConsumerFilter
from services.groups import GroupService, check_offsets_mode
from services.long_poll import WaiterRegistry, WakeReason
from services.metrics import Metrics
from services.pull import MOVED, AbandonFactory, AbandonWatch, waitable
from services.topics import TopicService
from storage import GetMessageStatus, MessageStore
from storage.queue_reader import RecordRange

_FILTERED = frozenset({GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.FOUND})
"""Statuses of a read whose filters left nothing of what it scanned."""


@dataclass(frozen=True, slots=True)
class QueueRecords:
    """The answer to a range read of one queue: its records as the CommitLog stores them,
    one after another (RocketMQ's record layout), ``count`` of them."""

    topic: str
    queue_id: int
    status: GetMessageStatus
    offset: int  # where the read started
    next_offset: int  # where the next read should start
    min_offset: int
    max_offset: int
    records: bytes
    count: int


class RecordReadService:
    """Reads ranges of a queue's records and parks while there is nothing to read."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicService,
        groups: GroupService,
        waiters: WaiterRegistry,
        metrics: Metrics,
        *,
        max_wait_ms: int = 30_000,
        on_slave: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._topics = topics
        self._groups = groups
        self._waiters = waiters
        self._metrics = metrics
        self._max_wait_ms = max_wait_ms
        self._on_slave = on_slave  # whether this broker serves as a slave now

    async def read_records(
        self,
        topic: str,
        queue_id: int,
        offset: int | None,
        max_bytes: int,
        *,
        tags: str | None = None,
        sql: str | None = None,
        end_offset: int | None = None,
        group: str | None = None,
        wait_ms: int = 0,
        abandon: AbandonFactory | None = None,
    ) -> QueueRecords:
        """The records of one queue from ``offset`` (None: its min offset) as stored, up to
        ``max_bytes`` (the first always) and before ``end_offset``; filtered as a pull is,
        the tag exactly (no hash collision gets through), with ``group``'s stored SQL92
        filter where ``sql`` names none. Where nothing is there yet it long-polls up to
        ``wait_ms`` as a pull does."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        wanted = ConsumerFilter.of(tags, sql)
        config = self._topics.for_read(topic)
        self._topics.check_read_queue(config, queue_id)
        if group is not None:
            group_config = await self._groups.for_consume(group)
            check_offsets_mode(group_config)
            wanted = wanted.or_stored(group_config, topic)
        if offset is None:
            offset = self._store.min_offset_in_queue(topic, queue_id)
        deadline = started + min(wait_ms, self._max_wait_ms) / 1000
        watch = AbandonWatch(abandon)
        try:
            read = await self._read_records(
                topic, queue_id, offset, max_bytes, wanted, end_offset, deadline, watch
            )
        finally:
            watch.close()
        self._metrics.delivered(topic, read.count, len(read.records))
        return QueueRecords(
            topic,
            queue_id,
            read.status,
            offset,
            read.next_begin_offset,
            read.min_offset,
            read.max_offset,
            read.records,
            read.count,
        )

    async def _read_records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_bytes: int,
        wanted: ConsumerFilter,
        end_offset: int | None,
        deadline: float,
        watch: AbandonWatch,
    ) -> RecordRange:
        """Read from ``offset``; while time is left before ``deadline``, scan on past what the
        filters skipped and park where a pull parks (never past ``end_offset``)."""
        loop = asyncio.get_running_loop()
        current = offset
        woken = False
        while True:
            read = self._read_range(topic, queue_id, current, max_bytes, wanted, end_offset)
            status, next_offset = read.status, read.next_begin_offset
            if read.count:
                return read
            filtered_out = status in _FILTERED and next_offset > current
            if filtered_out:
                current = next_offset
            ended = end_offset is not None and current >= end_offset
            if ended or loop.time() >= deadline:
                break
            if filtered_out:
                await asyncio.sleep(0)  # a long filtered backlog must not hog the loop
                continue
            if not waitable(status, current, woken):
                break
            reason = await self._waiters.wait(
                ((topic, queue_id),), deadline - loop.time(), wanted.tags, watch.future()
            )
            if reason in (WakeReason.SHUTDOWN, WakeReason.ABANDONED):
                break
            woken = woken or reason is WakeReason.ARRIVED
        if current != offset and status not in MOVED:  # the filters skipped what was there
            return RecordRange(
                GetMessageStatus.NO_MATCHED_MESSAGE, current, read.min_offset, read.max_offset
            )
        return read

    def _read_range(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_bytes: int,
        wanted: ConsumerFilter,
        end_offset: int | None,
    ) -> RecordRange:
        read = self._store.read_records(
            topic,
            queue_id,
            offset,
            max_bytes,
            wanted.store_tags,
            wanted.record_test,
            end_offset=end_offset,
            on_slave=self._on_slave(),
        )
        if read.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE:  # as a pull says it
            read = RecordRange(GetMessageStatus.NO_MESSAGE_IN_QUEUE, read.next_begin_offset, 0, 0)
        return read

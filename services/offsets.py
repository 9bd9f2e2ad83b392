"""Consumer offsets: where a group starts, commits, the lag report and periodic persistence.

Offsets are "next offset to consume" per (group, topic, queue) in consumerOffset.json
(reference §10.6). Commits change memory only; :class:`OffsetPersister` writes the file every
few seconds when something changed, and once more at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from services.background import BackgroundLoop
from services.errors import InvalidOffsetError, ServiceError
from services.groups import GroupService, check_group_name, check_offsets_mode
from services.topics import TopicService
from services.trace.tracer import Tracer
from storage import MessageStore
from storage.config_managers import (
    CONSUME_FROM_LATEST,
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
)
from storage.lag_model import LagFigures, queue_lag_figures
from storage.topic_names import retry_topic

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    """One offset to commit."""

    topic: str
    queue_id: int
    offset: int  # next offset to consume


@dataclass(frozen=True, slots=True)
class QueueLag:
    """One queue's committed offset against the store."""

    queue_id: int
    committed_offset: int  # next offset the group will consume
    min_offset: int
    max_offset: int
    lag: int  # max offset - committed offset, floored at 0 (storage.lag_model)
    last_commit_timestamp: int  # ms; 0 when unknown
    # Age of the oldest message the group has not consumed; 0 when none waits, None when
    # its store time cannot be read.
    lag_seconds: float | None = 0.0


@dataclass(frozen=True, slots=True)
class TopicLag:
    topic: str
    queues: list[QueueLag]

    @property
    def total_lag(self) -> int:
        """Lag in messages over the topic's queues."""
        return sum(q.lag for q in self.queues)


class OffsetService:
    """Commits, start positions and lag of consumer groups."""

    def __init__(
        self,
        store: MessageStore,
        manager: ConsumerOffsetManager,
        topics: TopicService,
        groups: GroupService,
        *,
        tracer: Tracer | None = None,
    ) -> None:
        self._tracer = tracer or Tracer.off()
        self._store = store
        self._manager = manager
        self._topics = topics
        self._groups = groups

    def position(self, group: SubscriptionGroupConfig, topic: str, queue_id: int) -> int:
        """Where the group reads next; a first read resolves ``consume_from`` and pins it.

        Storing the resolved start pins it: with ``latest`` a later pull must not jump past
        messages that arrived after the first one. A pin is not a commit: the queue has no
        last commit time until the group commits it.
        """
        name = group.group_name
        committed = self._manager.query_offset(name, topic, queue_id)
        if committed >= 0:
            return committed
        start = self._start_offset(group, topic, queue_id)
        self._manager.pin_offset(name, topic, queue_id, start)
        return start

    def _start_offset(self, group: SubscriptionGroupConfig, topic: str, queue_id: int) -> int:
        """Where the group's first read of a queue starts: as its ``consume_from`` says; in
        its own retry topic, at the queue's min offset whatever it says (every message there
        is one of its retries: RocketMQ's consumers start a retry queue at 0)."""
        store = self._store
        if topic == retry_topic(group.group_name):
            return store.min_offset_in_queue(topic, queue_id)
        timestamp = group.consume_from_timestamp
        if timestamp is not None:
            return store.first_offset_at_or_after(topic, queue_id, timestamp)
        if group.consume_from == CONSUME_FROM_LATEST:
            return store.max_offset_in_queue(topic, queue_id)
        return store.min_offset_in_queue(topic, queue_id)

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset on the queue; -1 when it never committed there."""
        return self._manager.query_offset(group, topic, queue_id)

    def has_committed(self, group: str, topic: str) -> bool:
        """Whether the group committed an offset on any queue of the topic."""
        return bool(self._manager.offsets_of(group, topic))

    def move(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Store a corrected position (after OFFSET_MOVED) without the client's checks."""
        self._manager.commit_offset(group, topic, queue_id, offset)

    async def commit(self, group: str, commits: Sequence[OffsetCommit]) -> None:
        """Validate every commit first, then store them all."""
        check_group_name(group)
        for commit in commits:
            self._check(commit)
        config = await self._groups.for_use(group)
        check_offsets_mode(config)
        tracer = self._tracer
        for commit in commits:
            topic, queue_id = commit.topic, commit.queue_id
            if tracer.topic_on(topic):  # from where the group stood: its start, at first
                old = self.position(config, topic, queue_id)
                tracer.committed(group, topic, queue_id, old, commit.offset)
            self._manager.commit_offset(group, topic, queue_id, commit.offset)

    def _check(self, commit: OffsetCommit) -> None:
        config = self._topics.get(commit.topic)
        self._topics.check_read_queue(config, commit.queue_id)
        max_offset = self._store.max_offset_in_queue(commit.topic, commit.queue_id)
        if not 0 <= commit.offset <= max_offset:
            raise InvalidOffsetError(
                f"offset {commit.offset} is outside 0 to {max_offset} "
                f"(the max offset of {commit.topic}/{commit.queue_id})"
            )

    def report(self, group: str, topic: str | None = None) -> list[TopicLag]:
        """Committed offset, min/max offset and lag of every queue the group committed, and
        of its retry topic's queues as soon as that holds messages (a group has an offset
        there only once it reads there: until then each queue counts from where it will
        start)."""
        if not self._groups.exists(group):
            self._groups.get(group)  # raises GroupNotFoundError
        report = []
        for key in self._manager.topic_groups():
            if key.group != group or (topic is not None and key.topic != topic):
                continue
            times = self._manager.commit_times_of(group, key.topic)
            queues = [
                self._queue_report(key.topic, queue_id, committed, times.get(queue_id, 0))
                for queue_id, committed in self._manager.offsets_of(group, key.topic).items()
            ]
            report.append(TopicLag(key.topic, queues))
        retry = retry_topic(group)
        if (topic is None or topic == retry) and not self._manager.offsets_of(group, retry):
            waiting = self._unread_retries(group)
            if waiting is not None:
                report.append(waiting)
        return report

    def _unread_retries(self, group: str) -> TopicLag | None:
        """The group's retry topic before the group has an offset there, each queue from
        where the group will start; None while it holds no message (or does not exist)."""
        topic = retry_topic(group)
        try:
            config = self._topics.get(topic)
        except ServiceError:  # no retry topic yet
            return None
        # Only the group's name decides where it starts in its retry topic.
        reader = SubscriptionGroupConfig(group)
        queues = [
            self._queue_report(topic, queue_id, self._start_offset(reader, topic, queue_id), 0)
            for queue_id in range(config.read_queue_nums)
        ]
        if all(q.max_offset == q.min_offset for q in queues):
            return None
        return TopicLag(topic, queues)

    def _queue_report(
        self, topic: str, queue_id: int, committed: int, last_commit_timestamp: int
    ) -> QueueLag:
        store = self._store
        max_offset = store.max_offset_in_queue(topic, queue_id)
        min_offset = store.min_offset_in_queue(topic, queue_id)
        figures = self._queue_lag(topic, queue_id, committed, min_offset, max_offset)
        return QueueLag(
            queue_id=queue_id,
            committed_offset=committed,
            min_offset=min_offset,
            max_offset=max_offset,
            lag=figures.lag,
            last_commit_timestamp=last_commit_timestamp,
            lag_seconds=figures.lag_seconds,
        )

    def _queue_lag(
        self, topic: str, queue_id: int, committed: int, min_offset: int, max_offset: int
    ) -> LagFigures:
        """Lag in messages and seconds (now - store time of the oldest unconsumed message),
        as :mod:`storage.lag_model` defines them for every lag report."""

        def store_time_at(offset: int) -> int | None:
            stored_at = self._store.store_timestamp_at(topic, queue_id, offset)
            return None if stored_at < 0 else stored_at

        now_ms = time.time_ns() // 1_000_000
        return queue_lag_figures(committed, min_offset, max_offset, store_time_at, now_ms)


class OffsetPersister:
    """Writes consumerOffset.json every ``interval_s`` when it changed, and at stop()."""

    def __init__(self, manager: ConsumerOffsetManager, interval_s: float = 5.0) -> None:
        self._manager = manager
        self._loop = BackgroundLoop("offset-persister", self.persist, interval_s)
        self.persist_count = 0

    def start(self) -> None:
        self._loop.start()

    async def persist(self) -> None:
        try:
            if await asyncio.to_thread(self._manager.persist_if_dirty):
                self.persist_count += 1
        except OSError:
            log.exception("could not persist consumer offsets; will retry")

    async def stop(self) -> None:
        """Stop the periodic task and persist whatever is left."""
        await self._loop.stop()
        await self.persist()

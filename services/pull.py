"""Pull: read a queue (or every queue of a topic for a group), long-polling when there is nothing.

Statuses follow RocketMQ's GetMessageStatus (reference §10.3). A queue the topic declares that
no message has reached yet is ``NO_MESSAGE_IN_QUEUE`` (RocketMQ creates the ConsumeQueue on
demand). A pull parks only where RocketMQ answers PULL_NOT_FOUND, the long-poll case:
``OFFSET_OVERFLOW_ONE``, an empty queue read from offset 0, and ``OFFSET_FOUND_NULL`` (a
missing ConsumeQueue file; it parks once, then answers with the next file's start). A
tag-filtered scan that matched nothing moves on from ``next_begin_offset`` while wait time is
left. A group pull also reads the group's ``%RETRY%`` queues, whatever the tag filter, and an
arrival there wakes it — also before the retry topic exists: it parks on the queues the topic
will have, and reads them once a send-back has created it. On a slave an offset wrong for its
queue is answered with that offset as the next one: a slave behind its master moves no
consumer (nor a group's position) back.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from services.consumer_filter import ConsumerFilter
from services.errors import InvalidRequestError, ServiceError
from services.groups import GroupService, awaited_retry_queues, check_offsets_mode
from services.long_poll import Key, WaiterRegistry, WakeReason
from services.metrics import Metrics
from services.offsets import OffsetCommit, OffsetService
from services.topics import TopicService
from services.trace.tracer import Tracer
from storage import GetMessageResult, GetMessageStatus, MessageStore
from storage.config_managers import SubscriptionGroupConfig
from storage.record.fields import (
    VIEW_BODY,
    VIEW_PROPERTIES,
    VIEW_SIZE,
    VIEW_TAGS,
    VIEW_TOPIC,
    MessageView,
    NamedView,
)
from storage.record.properties import PROPERTY_RETRY_TOPIC
from storage.topic_names import is_retry_topic, retry_topic

AbandonFactory = Callable[[], Awaitable[Any]]
"""Returns an awaitable that completes when the caller gives up (its client disconnected)."""

MOVED = frozenset({GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY})
_READ_ON = frozenset(
    {
        GetMessageStatus.FOUND,
        GetMessageStatus.NO_MATCHED_MESSAGE,
        GetMessageStatus.MESSAGE_WAS_REMOVING,
        GetMessageStatus.OFFSET_FOUND_NULL,
    }
)


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class PullOptions:
    """What one pull asks for."""

    max_messages: int = 32
    max_bytes: int | None = None
    tags: str | None = None  # ``*`` or ``A||B``
    wait_ms: int = 0  # long-poll time when nothing is found
    sql: str | None = None  # a SQL92 filter on the messages' properties


@dataclass(frozen=True, slots=True)
class QueuePull:
    """The answer to a pull from one queue: its messages as a consumer is shown them
    (:data:`~storage.record.fields.MessageView`), read straight from the CommitLog's mapped
    files; :attr:`messages` names their fields.
    """

    topic: str
    queue_id: int
    status: GetMessageStatus
    offset: int  # where the pull started
    next_offset: int  # where the next pull should start
    min_offset: int
    max_offset: int
    views: list[MessageView]

    @property
    def messages(self) -> list[NamedView]:
        return [NamedView._make(v) for v in self.views]


@dataclass(frozen=True, slots=True)
class QueueProgress:
    """One queue of a group pull: the group's position before and after."""

    queue_id: int
    offset: int  # the group's position when the pull started
    next_offset: int  # commit this to acknowledge what the pull returned from the queue
    max_offset: int
    topic: str = ""  # the queue's topic: the pulled topic, or the group's retry topic


@dataclass(frozen=True, slots=True)
class GroupPull:
    """The answer to a group pull across every readable queue of a topic.

    As for :class:`QueuePull`, the messages are views; each is under the topic it was first
    sent to (a retried one names it in RETRY_TOPIC), which its consumer sees.
    """

    group: str
    topic: str
    views: list[MessageView]
    queues: list[QueueProgress]
    # For each message, the topic whose queue it was read from (differs for retries).
    queue_topics: list[str] = dataclasses.field(default_factory=list)

    @property
    def messages(self) -> list[NamedView]:
        return [NamedView._make(v) for v in self.views]


@dataclass(slots=True)
class _GroupQueues:
    """The queues a group pull reads — the topic's, then its retry topic's once that exists —
    and the group's position in each when the pull started."""

    topic: str
    keys: list[Key]
    start: dict[Key, int] = dataclasses.field(default_factory=dict)
    retry_keys: list[Key] = dataclasses.field(default_factory=list)

    def add_retry(self, key: Key, offset: int) -> None:
        self.keys.append(key)
        self.retry_keys.append(key)
        self.start[key] = offset

    def awaited_retry_keys(self, group: SubscriptionGroupConfig) -> list[Key]:
        """Before the retry topic exists: the queues it will have (none when pulling it)."""
        if retry_topic(group.group_name) == self.topic:
            return []
        return awaited_retry_queues(group)


class AbandonWatch:
    """Starts the caller's disconnect watch on the first park only, and stops it at the end."""

    __slots__ = ("_factory", "_task")

    def __init__(self, factory: AbandonFactory | None) -> None:
        self._factory = factory
        self._task: asyncio.Future[Any] | None = None

    def future(self) -> asyncio.Future[Any] | None:
        if self._task is None and self._factory is not None:
            self._task = asyncio.ensure_future(self._factory())
        return self._task

    def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


class PullService:
    """Reads queues for consumers and parks them while there is nothing to read."""

    def __init__(
        self,
        store: MessageStore,
        topics: TopicService,
        groups: GroupService,
        offsets: OffsetService,
        waiters: WaiterRegistry,
        metrics: Metrics,
        *,
        max_wait_ms: int = 30_000,
        on_slave: Callable[[], bool] = lambda: False,
        tracer: Tracer | None = None,
    ) -> None:
        self._tracer = tracer or Tracer.off()
        self._max_wait_ms = max_wait_ms
        self._on_slave = on_slave  # whether this broker serves as a slave now
        self._store = store
        self._topics = topics
        self._groups = groups
        self._offsets = offsets
        self._waiters = waiters
        self._metrics = metrics
        self._rotation: dict[tuple[str, str], int] = {}

    # ------------------------------------------------------------------ one queue

    async def pull_queue(
        self,
        topic: str,
        queue_id: int,
        offset: int | None,
        options: PullOptions,
        *,
        group: str | None = None,
        commit_offset: int | None = None,
        abandon: AbandonFactory | None = None,
    ) -> QueuePull:
        """Pull from one queue; ``offset`` None starts at the group's position (or the min)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        wanted = ConsumerFilter.of(options.tags, options.sql)  # refused before any commit
        config = self._topics.for_read(topic)
        self._topics.check_read_queue(config, queue_id)
        if commit_offset is not None and group is None:
            raise InvalidRequestError("commit_offset needs the group whose offset it is")
        if group is not None:
            group_config = await self._groups.for_consume(group)
            check_offsets_mode(group_config)
            wanted = wanted.or_stored(group_config, topic)
            if commit_offset is not None:
                await self._offsets.commit(group, [OffsetCommit(topic, queue_id, commit_offset)])
            if offset is None:
                offset = self._offsets.position(group_config, topic, queue_id)
        if offset is None:
            offset = self._store.min_offset_in_queue(topic, queue_id)
        options = self._clamp(options)
        watch = AbandonWatch(abandon)
        try:
            pulled = await self._pull_queue(
                topic, queue_id, offset, options, wanted, started, watch
            )
        finally:
            watch.close()
            self._metrics.pull_duration.observe(loop.time() - started)
        self._count_out(topic, pulled.views)
        self._tracer.queue_pulled(group, topic, pulled.views)
        return pulled

    async def _pull_queue(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        options: PullOptions,
        wanted: ConsumerFilter,
        started: float,
        watch: AbandonWatch,
    ) -> QueuePull:
        loop = asyncio.get_running_loop()
        deadline = started + options.wait_ms / 1000
        current = offset
        skipped = woken = False
        while True:
            result, messages = self._read(topic, queue_id, current, options, wanted, None)
            status = result.status
            if messages:
                return _queue_pull(topic, queue_id, offset, result, messages)
            # Nothing matched the filter (by hash code, or by the exact tag after a hash
            # collision): move past what was scanned.
            filtered_out = (
                status in (GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.FOUND)
                and result.next_begin_offset > current
            )
            if filtered_out and options.wait_ms > 0:
                skipped, current = True, result.next_begin_offset
                if loop.time() < deadline:
                    await asyncio.sleep(0)  # a long filtered backlog must not hog the loop
                    continue
            remaining = deadline - loop.time()
            if not waitable(status, current, woken) or remaining <= 0:
                break
            reason = await self._waiters.wait(
                ((topic, queue_id),), remaining, wanted.tags, watch.future()
            )
            if reason in (WakeReason.SHUTDOWN, WakeReason.ABANDONED):
                break
            woken = woken or reason is WakeReason.ARRIVED
        if skipped:
            return QueuePull(
                topic,
                queue_id,
                GetMessageStatus.NO_MATCHED_MESSAGE,
                offset,
                current,
                result.min_offset,
                result.max_offset,
                [],
            )
        return _queue_pull(topic, queue_id, offset, result, [])

    # ------------------------------------------------------------------ a group

    async def pull_group(
        self,
        group: str,
        topic: str,
        options: PullOptions,
        *,
        auto_commit: bool = False,
        abandon: AbandonFactory | None = None,
    ) -> GroupPull:
        """Pull from the group's positions in every readable queue of ``topic`` and of the
        group's retry topic ``%RETRY%<group>`` (a retried message carries its original topic,
        from ``RETRY_TOPIC``, and the retry queue it came from)."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        config = self._topics.for_read(topic)
        group_config = await self._groups.for_consume(group)
        check_offsets_mode(group_config)
        keys = [(topic, q) for q in range(config.read_queue_nums)]
        queues = _GroupQueues(
            topic, keys, {k: self._offsets.position(group_config, topic, k[1]) for k in keys}
        )
        self._join_retry_topic(group_config, queues)
        options = self._clamp(options)
        watch = AbandonWatch(abandon)
        try:
            found, position = await self._pull_group(group_config, queues, options, started, watch)
        finally:
            watch.close()
            self._metrics.pull_duration.observe(loop.time() - started)
        start = queues.start  # with the retry topic's queues, if it appeared meanwhile
        self._tracer.group_pulled(group, topic, found, start, position if auto_commit else None)
        if auto_commit:
            for key in queues.keys:
                if position[key] != start[key]:
                    self._offsets.move(group, key[0], key[1], position[key])
        self._count_out(topic, found)
        store = self._store
        progress = [
            QueueProgress(q, start[(t, q)], position[(t, q)], store.max_offset_in_queue(t, q), t)
            for t, q in queues.keys
        ]
        queue_topics = [m[VIEW_TOPIC] for m in found]
        return GroupPull(group, topic, [_as_original(m) for m in found], progress, queue_topics)

    def _join_retry_topic(self, group: SubscriptionGroupConfig, queues: _GroupQueues) -> None:
        """Read the group's retry topic too, from the group's positions, once it exists."""
        retry = retry_topic(group.group_name)
        if retry == queues.topic or queues.retry_keys:
            return
        try:
            config = self._topics.for_read(retry)
        except ServiceError:  # no retry topic yet, or not readable
            return
        for queue_id in range(config.read_queue_nums):
            key = (retry, queue_id)
            queues.add_retry(key, self._offsets.position(group, retry, queue_id))

    async def _pull_group(
        self,
        group_config: SubscriptionGroupConfig,
        queues: _GroupQueues,
        options: PullOptions,
        started: float,
        watch: AbandonWatch,
    ) -> tuple[list[MessageView], dict[Key, int]]:
        loop = asyncio.get_running_loop()
        group = group_config.group_name
        deadline = started + options.wait_ms / 1000
        wanted = ConsumerFilter.of(options.tags, options.sql).or_stored(group_config, queues.topic)
        keys, start = queues.keys, queues.start
        position = dict(start)
        messages: list[MessageView] = []
        order = self._rotate(group, keys[0][0] if keys else "", keys)
        while True:
            advanced = self._read_round(group, order, start, position, options, wanted, messages)
            remaining = deadline - loop.time()
            if messages or not keys or remaining <= 0:
                break
            if advanced:
                await asyncio.sleep(0)
                continue
            # Retries are delivered whatever their tag: any arrival in a retry queue wakes,
            # also in one a send-back creates meanwhile.
            retry_keys = queues.retry_keys or queues.awaited_retry_keys(group_config)
            reason = await self._waiters.wait(
                keys, remaining, wanted.tags, watch.future(), unfiltered=retry_keys
            )
            if reason in (WakeReason.SHUTDOWN, WakeReason.ABANDONED):
                break
            joined = len(keys)
            self._join_retry_topic(group_config, queues)
            for key in keys[joined:]:
                order.append(key)
                position[key] = start[key]
        return messages, position

    def _read_round(
        self,
        group: str,
        order: list[tuple[str, int]],
        start: dict[tuple[str, int], int],
        position: dict[tuple[str, int], int],
        options: PullOptions,
        wanted: ConsumerFilter,
        messages: list[MessageView],
    ) -> bool:
        """Read each queue once from its position; True when a position moved without data."""
        advanced = False
        size = sum([m[VIEW_SIZE] for m in messages])
        for key in order:
            topic, queue_id = key
            left = options.max_messages - len(messages)
            byte_budget = None if options.max_bytes is None else options.max_bytes - size
            if left <= 0 or (byte_budget is not None and byte_budget <= 0):
                break
            offset = position[key]
            # Retries are delivered whatever their tag (RocketMQ: filterSupportRetry=false).
            queue_filter = wanted.for_retries() if is_retry_topic(topic) else wanted
            limited = PullOptions(left, byte_budget)
            result, found = self._read(topic, queue_id, offset, limited, queue_filter, group)
            status = result.status
            moved = status in MOVED or (
                status is GetMessageStatus.NO_MESSAGE_IN_QUEUE and offset != 0
            )
            if moved and result.next_begin_offset != offset:
                # The group's position is invalid (expired, or beyond the queue): correct it.
                position[key] = start[key] = result.next_begin_offset
                self._offsets.move(group, topic, queue_id, result.next_begin_offset)
                advanced = True
            elif status in _READ_ON and result.next_begin_offset != offset:
                position[key] = result.next_begin_offset
                advanced = advanced or not found
            messages.extend(found)
            size += sum([m[VIEW_SIZE] for m in found])
        return advanced

    def _rotate(self, group: str, topic: str, queue_ids: list[_T]) -> list[_T]:
        """Queue order for this pull: start one queue later each time, so none starves."""
        if not queue_ids:
            return []
        key = (group, topic)
        first = self._rotation.get(key, 0) % len(queue_ids)
        self._rotation[key] = first + 1
        return queue_ids[first:] + queue_ids[:first]

    # ------------------------------------------------------------------ shared

    def _clamp(self, options: PullOptions) -> PullOptions:
        """Cut the long-poll time to the broker's maximum."""
        if options.wait_ms <= self._max_wait_ms:
            return options
        return dataclasses.replace(options, wait_ms=self._max_wait_ms)

    def _read(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        options: PullOptions,
        wanted: ConsumerFilter,
        group: str | None,
    ) -> tuple[GetMessageResult, list[MessageView]]:
        result = self._store.get_message(
            group or "",
            topic,
            queue_id,
            offset,
            options.max_messages,
            options.max_bytes,
            wanted.store_tags,
            views=True,
            on_slave=self._on_slave(),
            property_filter=wanted.property_test,
        )
        if result.status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE:
            # Callers read only queues the topic declares; RocketMQ's findConsumeQueue creates
            # a missing ConsumeQueue on demand, so such a queue is simply empty.
            result = GetMessageResult(
                status=GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                next_begin_offset=result.next_begin_offset,
                min_offset=0,
                max_offset=0,
            )
        messages = result.views
        if messages and wanted.tags.tags is not None:
            # The store filtered by hash code; drop hash collisions by the exact tag.
            messages = [m for m in messages if wanted.keeps_tags(m[VIEW_TAGS])]
        return result, messages

    def _count_out(self, topic: str, messages: list[MessageView]) -> None:
        if messages:
            body_bytes = sum([len(m[VIEW_BODY]) for m in messages])
            self._metrics.delivered(topic, len(messages), body_bytes)


def waitable(status: GetMessageStatus, offset: int, woken: bool) -> bool:
    """Whether a pull that found nothing parks (RocketMQ's PULL_NOT_FOUND cases).

    A missing ConsumeQueue file (``OFFSET_FOUND_NULL``) does not come back: after one wake-up
    the pull answers with the next file's start, as RocketMQ re-executes a woken pull once.
    """
    if status is GetMessageStatus.OFFSET_OVERFLOW_ONE:
        return True
    if status is GetMessageStatus.NO_MESSAGE_IN_QUEUE:
        return offset == 0
    return status is GetMessageStatus.OFFSET_FOUND_NULL and not woken


def _queue_pull(
    topic: str,
    queue_id: int,
    offset: int,
    result: GetMessageResult,
    messages: list[MessageView],
) -> QueuePull:
    status = result.status
    if status is GetMessageStatus.FOUND and not messages:
        status = GetMessageStatus.NO_MATCHED_MESSAGE
    return QueuePull(
        topic,
        queue_id,
        status,
        offset,
        result.next_begin_offset,
        result.min_offset,
        result.max_offset,
        messages,
    )


def _as_original(message: MessageView) -> MessageView:
    """``message`` under the topic it was first sent to: a retried one names it in
    RETRY_TOPIC."""
    topic = message[VIEW_TOPIC]
    if not is_retry_topic(topic):
        return message
    original = message[VIEW_PROPERTIES].get(PROPERTY_RETRY_TOPIC) or topic
    if original == topic:
        return message
    return NamedView._make(message)._replace(topic=original)

"""Topic rules: names, configs (topics.json), auto-creation, system topics, queue statistics.

Producers may not write the system topic nor a group's ``%RETRY%``/``%DLQ%`` topic
(:meth:`TopicService.for_produce`); the broker's own puts (send-back, redrive, delayed
delivery) reach them through :meth:`TopicService.ensure` and :meth:`TopicService.for_send`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from services.errors import (
    InvalidTopicConfigError,
    QueueNotFoundError,
    SystemTopicError,
    TopicNotFoundError,
    TopicNotReadableError,
    TopicNotWriteableError,
)
from storage import MessageStore
from storage.config_managers import (
    PERM_INHERIT,
    PERM_READ,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    ConsumerOffsetManager,
    TopicConfig,
    TopicConfigManager,
)
from storage.timer import TIMER_TOPIC
from storage.topic_names import (
    REVIVE_TOPIC,
    TRACE_TOPIC,
    TRANSACTION_TOPICS,
    check_topic,
    is_group_topic,
)

SYSTEM_TOPICS = frozenset(
    {SCHEDULE_TOPIC, REVIVE_TOPIC, TIMER_TOPIC, TRACE_TOPIC, *TRANSACTION_TOPICS}
)
"""Topics the broker writes itself; clients may read them but not send to or change them."""

PERM_ALL = PERM_READ | PERM_WRITE | PERM_INHERIT


@dataclass(frozen=True, slots=True)
class TopicPolicy:
    """How unknown topics are treated."""

    auto_create: bool = True  # a send to an unknown topic creates it
    default_queue_nums: int = 8  # read and write queues of an auto-created topic


@dataclass(frozen=True, slots=True)
class QueueStats:
    """One queue of a topic as the store sees it."""

    queue_id: int
    min_offset: int  # first offset still readable
    max_offset: int  # next offset to be written
    last_store_timestamp: int  # ms of the newest message; 0 when the queue is empty


@dataclass(frozen=True, slots=True)
class QueueSeek:
    """Where a seek by time lands in one queue."""

    queue_id: int
    offset: int  # first offset stored at or after the time; max_offset when none is
    store_timestamp: int  # store time of the message at ``offset``; 0 when there is none
    min_offset: int
    max_offset: int


def check_topic_name(topic: str) -> str:
    """The topic name itself; ``InvalidTopicError`` (INVALID_TOPIC_NAME) when not valid."""
    return check_topic(topic)


class TopicService:
    """Reads and changes topic configs; decides whether a topic may be sent to or read."""

    def __init__(
        self,
        store: MessageStore,
        manager: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        policy: TopicPolicy,
    ) -> None:
        self._store = store
        self._manager = manager
        self._offsets = offsets
        self._policy = policy

    @property
    def max_queues(self) -> int:
        """The most read or write queues a topic may have."""
        return self._store.config.max_queues_per_topic

    def get(self, topic: str) -> TopicConfig:
        """The topic's config; TopicNotFoundError when there is none."""
        config = self._manager.get(check_topic_name(topic))
        if config is None:
            raise TopicNotFoundError(f"topic {topic!r} does not exist")
        return config

    def all(self) -> list[TopicConfig]:
        return self._manager.all()

    def page(self, after: str | None, limit: int) -> tuple[list[TopicConfig], int]:
        """At most ``limit`` topic configs named after ``after``, by name; and the total."""
        return self._manager.page(after, limit)

    async def for_produce(self, topic: str) -> TopicConfig:
        """Like :meth:`for_send`, and the topic is not a group's retry or dead-letter topic:
        only send-back and redrive put there."""
        check_topic_name(topic)
        if is_group_topic(topic):
            raise SystemTopicError(
                f"{topic} is a consumer group's retry or dead-letter topic: the broker writes it "
                "(send a message back, or redrive dead letters, instead)"
            )
        return await self.for_send(topic)

    async def for_send(self, topic: str) -> TopicConfig:
        """The config of a topic that may be written to, auto-created when allowed."""
        check_topic_name(topic)
        if topic in SYSTEM_TOPICS:
            raise SystemTopicError(f"{topic} is a system topic: the broker writes it itself")
        config = self._manager.get(topic)
        if config is None:
            if not self._policy.auto_create:
                raise TopicNotFoundError(
                    f"topic {topic!r} does not exist and auto-creation is turned off"
                )
            nums = self._policy.default_queue_nums
            config = TopicConfig(topic, read_queue_nums=nums, write_queue_nums=nums)
            # topics.json is fsynced on every change: keep that off the event loop.
            await asyncio.to_thread(self._manager.put, config)
        if not config.is_writeable:
            raise TopicNotWriteableError(f"topic {topic!r} is not writeable (perm {config.perm})")
        return config

    def for_read(self, topic: str) -> TopicConfig:
        """The config of a topic a consumer may read."""
        config = self.get(topic)
        if not config.is_readable:
            raise TopicNotReadableError(f"topic {topic!r} is not readable (perm {config.perm})")
        return config

    @staticmethod
    def check_read_queue(config: TopicConfig, queue_id: int) -> None:
        if not 0 <= queue_id < config.read_queue_nums:
            raise QueueNotFoundError(
                f"topic {config.topic_name!r} has {config.read_queue_nums} read queues "
                f"(0 to {config.read_queue_nums - 1}); there is no queue {queue_id}"
            )

    @staticmethod
    def check_write_queue(config: TopicConfig, queue_id: int) -> None:
        if not 0 <= queue_id < config.write_queue_nums:
            raise QueueNotFoundError(
                f"topic {config.topic_name!r} has {config.write_queue_nums} write queues "
                f"(0 to {config.write_queue_nums - 1}); there is no queue {queue_id}"
            )

    async def ensure(self, config: TopicConfig) -> None:
        """Create a topic the broker owns (``%RETRY%``, ``%DLQ%``) on first use; an existing
        config (perhaps changed by an operator) is kept."""
        if self._manager.get(config.topic_name) is None:
            await asyncio.to_thread(self._manager.put, config)

    async def put(
        self,
        topic: str,
        *,
        read_queue_nums: int,
        write_queue_nums: int,
        perm: int,
        order: bool = False,
        trace: bool | None = None,
    ) -> tuple[TopicConfig, bool]:
        """Create or replace a topic's config; returns (config, created)."""
        check_topic_name(topic)
        if topic in SYSTEM_TOPICS:
            raise SystemTopicError(f"{topic} is a system topic and cannot be changed")
        limit = self.max_queues
        nums = {"read_queue_nums": read_queue_nums, "write_queue_nums": write_queue_nums}
        for name, value in nums.items():
            if not 1 <= value <= limit:
                raise InvalidTopicConfigError(f"{name} must be 1 to {limit}, not {value}")
        if perm & ~PERM_ALL:
            raise InvalidTopicConfigError(f"perm must combine the bits 4, 2 and 1, not {perm}")
        created = self._manager.get(topic) is None
        config = TopicConfig(
            topic,
            read_queue_nums=read_queue_nums,
            write_queue_nums=write_queue_nums,
            perm=perm,
            order=order,
            trace=trace,
        )
        await asyncio.to_thread(self._manager.put, config)
        return config, created

    async def delete(self, topic: str) -> None:
        """Forget the topic's config, its ConsumeQueues and every group's offsets on it.

        Its records stay in the CommitLog until their file expires.
        """
        self.get(topic)
        if topic in SYSTEM_TOPICS:
            raise SystemTopicError(f"{topic} is a system topic and cannot be deleted")
        await asyncio.to_thread(self._manager.delete, topic)
        self._store.delete_topic(topic)
        self._offsets.remove_topic(topic)

    def offset_by_time(
        self, topic: str, queue_id: int, timestamp_ms: int, *, at_or_after: bool = False
    ) -> QueueSeek:
        """A queue's offset for a time, with the queue's range: what a seek by time needs.

        By default RocketMQ's ``searchOffset``: the message stored closest to the time (one
        stored just before it may win). ``at_or_after``: the first message stored at or
        after the time (the max offset when none is), for reading a time range.
        """
        config = self.for_read(topic)
        self.check_read_queue(config, queue_id)
        store = self._store
        if at_or_after:
            offset = store.first_offset_at_or_after(topic, queue_id, timestamp_ms)
        else:
            offset = store.offset_by_time(topic, queue_id, timestamp_ms)
        stored = store.store_timestamp_at(topic, queue_id, offset)
        return QueueSeek(
            queue_id=queue_id,
            offset=offset,
            store_timestamp=max(0, stored),
            min_offset=store.min_offset_in_queue(topic, queue_id),
            max_offset=store.max_offset_in_queue(topic, queue_id),
        )

    def stored_messages(self, topic: str) -> int:
        """Messages still stored in every queue of ``topic`` (max - min offset), whether or not
        the topic has a config; 0 when it has no queue."""
        store = self._store
        return sum(
            store.max_offset_in_queue(topic, queue_id) - store.min_offset_in_queue(topic, queue_id)
            for queue_id in store.queue_ids(topic)
        )

    def queue_stats(self, config: TopicConfig) -> list[QueueStats]:
        """Min/max offset and newest store time of every queue the config names."""
        store = self._store
        topic = config.topic_name
        count = max(config.read_queue_nums, config.write_queue_nums)
        stats = []
        for queue_id in range(count):
            max_offset = store.max_offset_in_queue(topic, queue_id)
            last = store.store_timestamp_at(topic, queue_id, max_offset - 1) if max_offset else 0
            stats.append(
                QueueStats(
                    queue_id=queue_id,
                    min_offset=store.min_offset_in_queue(topic, queue_id),
                    max_offset=max_offset,
                    last_store_timestamp=max(0, last),
                )
            )
        return stats

"""Offset reset with a preview: move a group to ``earliest``, ``latest``, a time, or explicit
offsets — and see first, per queue, where it is, where it would go, and how many messages
that skips or delivers again. Works whether or not any consumer of the group is online
(offsets live in the broker, not in clients).

A group that consumes by POP restarts there too (as RocketMQ 5 resets a pop offset): its pop
offset on each reset queue becomes the target, and what was in flight there is dropped with
the old position — its receipt handles stop working and none of it is revived to the retry
topic; what is at or after the target is delivered again from there, and a FIFO queue is no
longer blocked (:meth:`services.pop.service.PopService.restart_queues`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum

from services.errors import InvalidOffsetError, InvalidRequestError
from services.groups import GroupService
from services.topics import TopicService
from storage import MessageStore
from storage.config_managers import ConsumerOffsetManager, TopicConfig


class ResetTarget(Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"
    OFFSETS = "offsets"


@dataclass(frozen=True, slots=True)
class ResetRequest:
    """Where to move a group; ``topic`` None means every topic the group has offsets on."""

    target: ResetTarget
    topic: str | None = None
    timestamp_ms: int | None = None
    offsets: Mapping[int, int] | None = None  # queue id -> offset, with ``OFFSETS``
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class QueueReset:
    """One queue's move. ``current_offset`` is -1 when the group never committed it."""

    topic: str
    queue_id: int
    current_offset: int
    target_offset: int
    min_offset: int
    max_offset: int

    @property
    def skipped(self) -> int:
        """Messages the group will never see because the reset jumps over them."""
        start = self.current_offset if self.current_offset >= 0 else self.min_offset
        return max(0, self.target_offset - start)

    @property
    def redelivered(self) -> int:
        """Messages the group will see again."""
        if self.current_offset < 0:
            return 0
        return max(0, self.current_offset - self.target_offset)


@dataclass(frozen=True, slots=True)
class ResetPlan:
    group: str
    request: ResetRequest
    queues: list[QueueReset]
    applied: bool

    @property
    def skipped(self) -> int:
        return sum(q.skipped for q in self.queues)

    @property
    def redelivered(self) -> int:
        return sum(q.redelivered for q in self.queues)


class OffsetResetService:
    """Plans a reset (the preview) and applies exactly that plan."""

    def __init__(
        self,
        store: MessageStore,
        offsets: ConsumerOffsetManager,
        topics: TopicService | None = None,
        groups: GroupService | None = None,
    ) -> None:
        self._store = store
        self._offsets = offsets
        self._topics = topics
        self._groups = groups

    async def reset(self, group: str, request: ResetRequest) -> ResetPlan:
        """Plan the reset of ``group`` (one topic, or every topic it has offsets on) and,
        unless it is a dry run, apply it. The group need not have a consumer online."""
        assert self._topics is not None and self._groups is not None
        if not self._groups.exists(group):
            self._groups.get(group)  # GroupNotFoundError
        if request.topic is not None:
            configs = [self._topics.for_read(request.topic)]
        else:
            names = sorted({k.topic for k in self._offsets.topic_groups() if k.group == group})
            configs = [self._topics.get(name) for name in names]
        plan = self.plan(group, request, configs)
        return plan if request.dry_run else await self.apply(plan)

    def plan(self, group: str, request: ResetRequest, topics: Iterable[TopicConfig]) -> ResetPlan:
        """Per queue: current, target, skipped and re-delivered; changes nothing."""
        self._check(request)
        queues = []
        for config in topics:
            topic = config.topic_name
            self._check_queue_ids(config, request)
            committed = self._offsets.offsets_of(group, topic)
            for queue_id in range(config.read_queue_nums):
                queues.append(self._queue_reset(topic, queue_id, committed, request))
        return ResetPlan(group, request, queues, applied=False)

    async def apply(self, plan: ResetPlan) -> ResetPlan:
        """Commit every target of ``plan``, and restart the group's POP consumption there.

        The commits and the POP restart happen before the first ``await``: a plan made with
        no await before this call is applied as it was shown.
        """
        for queue in plan.queues:
            self._offsets.commit_offset(
                plan.group, queue.topic, queue.queue_id, queue.target_offset
            )
        if self._groups is not None:
            positions = {(q.topic, q.queue_id): q.target_offset for q in plan.queues}
            await self._groups.offsets_reset(plan.group, positions)
        return ResetPlan(plan.group, plan.request, plan.queues, applied=True)

    def _check(self, request: ResetRequest) -> None:
        if request.target is ResetTarget.TIMESTAMP and request.timestamp_ms is None:
            raise InvalidRequestError("a reset to a time needs timestamp_ms")
        if request.target is ResetTarget.OFFSETS:
            if request.topic is None:
                raise InvalidRequestError("a reset to explicit offsets names one topic")
            if not request.offsets:
                raise InvalidRequestError("a reset to explicit offsets needs offsets per queue")

    @staticmethod
    def _check_queue_ids(config: TopicConfig, request: ResetRequest) -> None:
        for queue_id in request.offsets or {}:
            if not 0 <= queue_id < config.read_queue_nums:
                raise InvalidOffsetError(
                    f"topic {config.topic_name!r} has no queue {queue_id} "
                    f"(read queues 0 to {config.read_queue_nums - 1})"
                )

    def _queue_reset(
        self, topic: str, queue_id: int, committed: Mapping[int, int], request: ResetRequest
    ) -> QueueReset:
        store = self._store
        low = store.min_offset_in_queue(topic, queue_id)
        high = store.max_offset_in_queue(topic, queue_id)
        current = committed.get(queue_id, -1)
        target = self._target(topic, queue_id, current, low, high, request)
        return QueueReset(topic, queue_id, current, target, low, high)

    def _target(
        self,
        topic: str,
        queue_id: int,
        current: int,
        low: int,
        high: int,
        request: ResetRequest,
    ) -> int:
        if request.target is ResetTarget.EARLIEST:
            return low
        if request.target is ResetTarget.LATEST:
            return high
        if request.target is ResetTarget.TIMESTAMP:
            assert request.timestamp_ms is not None
            return self._store.first_offset_at_or_after(topic, queue_id, request.timestamp_ms)
        assert request.offsets is not None
        if queue_id not in request.offsets:
            return current if current >= 0 else low
        offset = request.offsets[queue_id]
        if not low <= offset <= high:
            raise InvalidOffsetError(
                f"offset {offset} for {topic}/{queue_id} is outside {low} to {high}"
            )
        return offset

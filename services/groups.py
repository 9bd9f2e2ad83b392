"""Consumer group rules: names, configs (subscriptionGroup.json), auto-creation.

A group name uses the topic-name characters (:mod:`storage.topic_names`), matched in full,
and is short enough for its ``%RETRY%`` and ``%DLQ%`` topics to be valid topic names.

A service that keeps state of its own per group (POP: in-flight messages and pop offsets)
registers as a :class:`GroupStateKeeper`: a delete and an offset reset reach it too, so a
group created again inherits nothing and a reset is where every kind of consumption resumes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from services.consumer_filter import compiled_filter
from services.errors import (
    ConsumeDisabledError,
    ConsumeModeConflictError,
    GroupNotFoundError,
    InvalidGroupNameError,
)
from storage.config_managers import (
    CONSUME_MODE_POP,
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from storage.topic_names import (
    MAX_TOPIC_LENGTH,
    RETRY_GROUP_TOPIC_PREFIX,
    is_valid_name,
    retry_topic,
)

MAX_GROUP_LENGTH: Final = MAX_TOPIC_LENGTH - len(RETRY_GROUP_TOPIC_PREFIX)
"""120: so that ``%RETRY%<group>`` and ``%DLQ%<group>`` stay within the topic limit."""


def check_group_name(group: str) -> str:
    """The group name itself; InvalidGroupNameError when it is not valid."""
    if not is_valid_name(group, MAX_GROUP_LENGTH):
        raise InvalidGroupNameError(
            f"invalid group name {group[:140]!r}: use 1 to {MAX_GROUP_LENGTH} characters "
            "from a-z A-Z 0-9 _ - % |"
        )
    return group


@dataclass(frozen=True, slots=True)
class GroupPolicy:
    """How unknown groups are treated."""

    auto_create: bool = True  # a pull or commit by an unknown group creates its config


def check_offsets_mode(config: SubscriptionGroupConfig) -> None:
    """409 for a pull or commit by a group that consumes by POP (receive/ack)."""
    if config.consume_mode == CONSUME_MODE_POP:
        raise ConsumeModeConflictError(
            f"group {config.group_name!r} consumes by receive/ack (POP); a group consumes "
            "either by offsets or by POP. Use another group for pull and commit"
        )


def awaited_retry_queues(config: SubscriptionGroupConfig) -> list[tuple[str, int]]:
    """The queues of ``%RETRY%<group>`` as a send-back or a revive creates it: where a
    long-poll of the group parks before the topic exists, so that its first retry wakes it."""
    topic = retry_topic(config.group_name)
    return [(topic, queue_id) for queue_id in range(max(1, config.retry_queue_nums))]


class GroupStateKeeper(Protocol):
    """A service keeping per-group state beyond the config and the committed offsets."""

    async def forget_group(self, group: str) -> None:
        """The group was deleted: drop everything kept for it."""

    async def restart_queues(self, group: str, positions: Mapping[tuple[str, int], int]) -> None:
        """The group's offsets were reset: consume each (topic, queue id) from its offset."""


class GroupService:
    """Reads and changes subscription group configs."""

    def __init__(
        self,
        manager: SubscriptionGroupManager,
        offsets: ConsumerOffsetManager,
        policy: GroupPolicy,
    ) -> None:
        self._manager = manager
        self._offsets = offsets
        self._policy = policy
        self._keepers: list[GroupStateKeeper] = []

    def add_state_keeper(self, keeper: GroupStateKeeper) -> None:
        """Tell ``keeper`` of every delete and offset reset from now on."""
        self._keepers.append(keeper)

    def get(self, group: str) -> SubscriptionGroupConfig:
        """The group's config; GroupNotFoundError when there is none."""
        config = self._manager.get(check_group_name(group))
        if config is None:
            raise GroupNotFoundError(f"consumer group {group!r} does not exist")
        return config

    def exists(self, group: str) -> bool:
        """Whether the group has a config or committed offsets."""
        check_group_name(group)
        return self._manager.get(group) is not None or group in self._offsets.groups()

    def all(self) -> list[SubscriptionGroupConfig]:
        return self._manager.all()

    def page(self, after: str | None, limit: int) -> tuple[list[SubscriptionGroupConfig], int]:
        """At most ``limit`` group configs named after ``after``, by name; and the total."""
        return self._manager.page(after, limit)

    async def for_use(self, group: str) -> SubscriptionGroupConfig:
        """The config of a group that pulls or commits, auto-created when allowed."""
        config = self._manager.get(check_group_name(group))
        if config is not None:
            return config
        if not self._policy.auto_create:
            raise GroupNotFoundError(
                f"consumer group {group!r} does not exist and auto-creation is turned off"
            )
        return await asyncio.to_thread(self._manager.get_or_create, group)

    async def for_consume(self, group: str) -> SubscriptionGroupConfig:
        """Like :meth:`for_use`, and the group must be allowed to consume."""
        config = await self.for_use(group)
        if not config.consume_enable:
            raise ConsumeDisabledError(f"consumer group {group!r} has consuming turned off")
        return config

    async def put(self, config: SubscriptionGroupConfig) -> bool:
        """Create or replace a group's config; returns whether it was created
        (INVALID_FILTER for a stored filter that does not parse)."""
        check_group_name(config.group_name)
        for expression in config.filters.values():
            compiled_filter(expression)
        created = self._manager.get(config.group_name) is None
        await asyncio.to_thread(self._manager.put, config)
        return created

    async def delete(self, group: str) -> None:
        """Forget the group's config, its committed offsets and what its keepers hold."""
        if not self.exists(group):
            raise GroupNotFoundError(f"consumer group {group!r} does not exist")
        await asyncio.to_thread(self._manager.delete, group)
        self._offsets.remove_group(group)
        for keeper in self._keepers:
            await keeper.forget_group(group)

    async def offsets_reset(self, group: str, positions: Mapping[tuple[str, int], int]) -> None:
        """The group's committed offsets were just reset to ``positions``: its keepers
        restart there too."""
        for keeper in self._keepers:
            await keeper.restart_queues(group, positions)

"""Consumer group rules: names, configs (subscriptionGroup.json), auto-creation.

A group name uses the topic-name characters (:mod:`storage.topic_names`), matched in full,
and is short enough for its ``%RETRY%`` and ``%DLQ%`` topics to be valid topic names.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

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
from storage.topic_names import MAX_TOPIC_LENGTH, RETRY_GROUP_TOPIC_PREFIX, is_valid_name

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
        """Create or replace a group's config; returns whether it was created."""
        check_group_name(config.group_name)
        created = self._manager.get(config.group_name) is None
        await asyncio.to_thread(self._manager.put, config)
        return created

    async def delete(self, group: str) -> None:
        """Forget the group's config and its committed offsets."""
        if not self.exists(group):
            raise GroupNotFoundError(f"consumer group {group!r} does not exist")
        await asyncio.to_thread(self._manager.delete, group)
        self._offsets.remove_group(group)

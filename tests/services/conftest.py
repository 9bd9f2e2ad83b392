"""Shared fixtures for the services tests: a running broker, or a bare store with its config
managers (for services built by hand), both on real files in a temp directory."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from services import Broker, BrokerConfig, StoreConfig
from services.appender import Appender
from services.durability import DurabilityTracker
from services.idempotency import IdempotencyService
from storage import Appended, Message, MessageStore, StoredMessage
from storage.config_managers import (
    ConsumerOffsetManager,
    DelayOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
    TopicConfig,
    TopicConfigManager,
)

SMALL = StoreConfig(commit_log_file_size=1024 * 1024, consume_queue_units_per_file=1000)
"""Small files: tests start fast and cross file boundaries."""

LEVELS = "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s"
"""Every delay level one second, so delayed-delivery tests finish quickly."""


async def until(condition: Callable[[], bool]) -> None:
    """Yield to the loop until ``condition`` holds (state the loop itself produces)."""
    for _ in range(100_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not met")


async def wait_for(condition: Callable[[], bool], within: float = 10.0) -> None:
    """Poll a condition on state this test does not produce itself (the scheduler does)."""
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    broker = Broker(BrokerConfig(tmp_path / "store", SMALL, offset_persist_interval_s=0.05))
    await broker.start()
    yield broker
    await broker.stop()


@dataclass
class World:
    """A store and its config managers, for services wired by hand."""

    root: Path
    store: MessageStore
    topics: TopicConfigManager
    groups: SubscriptionGroupManager
    offsets: ConsumerOffsetManager
    delays: DelayOffsetManager
    idempotency: IdempotencyService

    async def put(self, messages: Sequence[Message]) -> Appended:
        return self.store.put(messages)

    async def ensure_topic(self, config: TopicConfig) -> None:
        if self.topics.get(config.topic_name) is None:
            self.topics.put(config)

    async def group(self, name: str) -> SubscriptionGroupConfig:
        return self.groups.get_or_create(name)

    async def topic_for_send(self, name: str) -> TopicConfig:
        config = self.topics.get(name)
        if config is None:
            config = TopicConfig(name, read_queue_nums=4, write_queue_nums=4)
            self.topics.put(config)
        return config

    def pull_all(self, topic: str) -> list[StoredMessage]:
        found = []
        for queue_id in self.store.queue_ids(topic):
            found.extend(self.store.get_message("g", topic, queue_id, 0, 1000).messages)
        return sorted(found, key=lambda m: m.physical_offset)


def open_world(root: Path) -> World:
    store = MessageStore.open(
        root, StoreConfig(commit_log_file_size=1024 * 1024, message_delay_levels=LEVELS)
    )
    config = root / "config"
    world = World(
        root,
        store,
        TopicConfigManager(config),
        SubscriptionGroupManager(config),
        ConsumerOffsetManager(config),
        DelayOffsetManager(config),
        IdempotencyService(store, Appender(store, DurabilityTracker(store))),
    )
    for manager in (world.topics, world.groups, world.offsets, world.delays):
        manager.load()
    return world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    opened = open_world(tmp_path)
    yield opened
    opened.store.close()

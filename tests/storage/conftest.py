"""Shared fixtures of the storage tests: stores with tiny files, so boundaries are crossed.

``TINY_CONFIG`` uses 4 KiB CommitLog files and 10-unit (200-byte) ConsumeQueue files: a
handful of messages already spans several files of each kind.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from storage import MessageStore, StoreConfig
from storage.record.message import Message

COMMIT_LOG_FILE_SIZE = 4096
CQ_UNITS_PER_FILE = 10
MAX_QUEUES = 8

TINY_CONFIG = StoreConfig(
    commit_log_file_size=COMMIT_LOG_FILE_SIZE,
    consume_queue_units_per_file=CQ_UNITS_PER_FILE,
    max_queues_per_topic=MAX_QUEUES,
    max_message_size=64 * 1024,
)

OpenStore = Callable[..., MessageStore]


class FlushWaiter:
    """Waits for the CommitLog to be on disk up to an offset, the way the services layer
    does: a flush listener hears every advance, ``wake_flush`` asks the group commit."""

    def __init__(self, store: MessageStore) -> None:
        self.store = store
        self._advanced = threading.Condition()
        store.flush_listeners.append(self._on_flushed)

    def _on_flushed(self, flushed: int) -> None:
        with self._advanced:
            self._advanced.notify_all()

    def wait(self, end_offset: int, timeout: float = 10.0) -> bool:
        """True once ``end_offset`` is flushed; False if ``timeout`` passes first."""
        self.store.wake_flush()
        with self._advanced:
            return self._advanced.wait_for(lambda: self.store.flushed_offset >= end_offset, timeout)


def message(
    topic: str = "TopicA",
    body: bytes = b"hello",
    queue_id: int = 0,
    tags: str | None = None,
    keys: str | None = None,
    **properties: str,
) -> Message:
    """A message with optional TAGS / KEYS properties."""
    props = dict(properties)
    if tags is not None:
        props["TAGS"] = tags
    if keys is not None:
        props["KEYS"] = keys
    return Message(topic=topic, body=body, queue_id=queue_id, properties=props)


def fill_two_queues(store: MessageStore, count: int, topic: str = "TopicA") -> None:
    """``count`` keyed messages over queues 0 and 1, then a batch of three into queue 1."""
    for i in range(count):
        store.put([message(topic, f"body-{i}".encode() * 20, queue_id=i % 2, keys=f"k{i}")])
    store.put([message(topic, b"batch", queue_id=1) for _ in range(3)])


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return tmp_path / "store"


@pytest.fixture
def open_store(store_dir: Path) -> Iterator[OpenStore]:
    """Open (or reopen) the store in ``store_dir``; every store opened is closed at the end."""
    opened: list[MessageStore] = []

    def _open(config: StoreConfig = TINY_CONFIG, root: Path | None = None) -> MessageStore:
        store = MessageStore.open(root or store_dir, config)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> MessageStore:
    """A fresh store with tiny files; closed after the test."""
    return open_store()

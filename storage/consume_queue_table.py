"""ConsumeQueueTable: every ConsumeQueue of the store, by topic and queue id.

RocketMQ's ``consumeQueueTable``: the dispatcher, recovery, the pull path, retention and
``check()`` all find queues here. It also keeps the deleted-topic tombstones
(``config/deletedTopics.json``): the CommitLog end at deletion, below which a topic's old
records are never dispatched again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from storage.consume_queue import ConsumeQueue
from storage.json_file import load_json, save_json


class ConsumeQueueTable:
    """ConsumeQueues under ``root`` (``<root>/<topic>/<queueId>/``), created on demand."""

    def __init__(
        self,
        root: Path,
        units_per_file: int,
        tombstones_path: Path,
    ) -> None:
        self.root = root
        self.units_per_file = units_per_file
        self.queues: dict[str, dict[int, ConsumeQueue]] = {}
        self.tombstones_path = tombstones_path
        self.deleted_topics: dict[str, int] = {}

    # ------------------------------------------------------------------ find

    def find(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self.queues.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def find_or_create(self, topic: str, queue_id: int) -> ConsumeQueue:
        queues = self.queues.get(topic)
        queue = queues.get(queue_id) if queues is not None else None
        if queue is None:
            queue = ConsumeQueue(self.root, topic, queue_id, self.units_per_file)
            self.queues.setdefault(topic, {})[queue_id] = queue
        return queue

    def __iter__(self) -> Iterator[ConsumeQueue]:
        """Every queue; a snapshot, so the owner may add queues while a flusher iterates."""
        for queues in list(self.queues.values()):
            yield from list(queues.values())

    def topics(self) -> list[str]:
        return sorted(self.queues)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self.queues.get(topic, {}))

    def min_offset(self, topic: str, queue_id: int) -> int:
        queue = self.find(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def max_offset(self, topic: str, queue_id: int) -> int:
        queue = self.find(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    @property
    def max_physic_offset(self) -> int:
        """The CommitLog end covered by every queue (0 when there is none)."""
        return max([queue.max_physic_offset for queue in self] + [0])

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """(topic, queue id) → next queue offset: the CommitLog's ``topicQueueTable``."""
        return {(queue.topic, queue.queue_id): queue.max_offset for queue in self}

    # ------------------------------------------------------------------ lifecycle

    def load(self) -> None:
        """Map every queue directory found under ``root``, and the tombstones."""
        self.deleted_topics = _load_tombstones(self.tombstones_path)
        if not self.root.is_dir():
            return
        for topic in _subdirectories(self.root):
            for queue_id in _subdirectories(self.root / topic):
                if queue_id.isdigit():
                    self.find_or_create(topic, int(queue_id)).load()

    def flush(self, least_pages: int) -> None:
        for queue in self:
            queue.flush(least_pages)

    def flush_all(self) -> None:
        for queue in self:
            queue.queue.flush_all()

    def close(self) -> None:
        for queue in self:
            queue.close()

    # ------------------------------------------------------------------ retention

    def delete_expired(self, min_physical: int) -> None:
        """Drop files below the CommitLog's new min offset, fix min offsets, and forget
        tombstones whose records are all gone."""
        for queue in self:
            queue.delete_expired_files(min_physical)
            queue.correct_min_offset(min_physical)
        expired = [t for t, end in self.deleted_topics.items() if end <= min_physical]
        if expired:
            for topic in expired:
                del self.deleted_topics[topic]
            save_json(self.tombstones_path, self.deleted_topics)

    def correct_min_offsets(self, min_physical: int) -> None:
        for queue in self:
            queue.correct_min_offset(min_physical)

    # ------------------------------------------------------------------ deleted topics

    def delete_topic(self, topic: str, commit_log_end: int) -> bool:
        """Tombstone ``topic`` at ``commit_log_end`` and destroy its queues, if it had any."""
        self.deleted_topics[topic] = commit_log_end
        save_json(self.tombstones_path, self.deleted_topics)
        queues = self.queues.pop(topic, None)
        if queues is None:
            return False
        for queue in queues.values():
            queue.destroy()
        _remove_empty_dirs(self.root / topic)
        return True


def _subdirectories(directory: Path) -> list[str]:
    """Names of the directories in ``directory``, sorted (no ``stat`` where the file system
    gives the entry types)."""
    with os.scandir(directory) as entries:
        return sorted(entry.name for entry in entries if entry.is_dir())


def _remove_empty_dirs(topic_dir: Path) -> None:
    for queue_dir in list(topic_dir.glob("*")):
        if queue_dir.is_dir() and not any(queue_dir.iterdir()):
            queue_dir.rmdir()
    if topic_dir.is_dir() and not any(topic_dir.iterdir()):
        topic_dir.rmdir()


def _load_tombstones(path: Path) -> dict[str, int]:
    data = load_json(path)
    if not isinstance(data, dict):
        return {}
    return {str(t): int(end) for t, end in data.items() if isinstance(end, int)}

"""Dead-letter queue: browse a group's ``%DLQ%<group>`` and redrive messages out of it.

Redrive re-sends each selected message to its original topic (``RETRY_TOPIC``) or a named
topic, with ``reconsume_times`` reset to 0 and ``REDRIVEN_FROM`` = the dead letter's msgId.
The dead letter itself stays (the log is append-only), so nothing is lost if a run stops
midway. A re-run does not send twice: a redriven message keeps its ``UNIQ_KEY``, so a
lookup of that key in the target topic finds a copy whose ``REDRIVEN_FROM`` names this
dead letter. ``dry_run`` reports what would move where and changes nothing.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from services.errors import ServiceError
from services.send import PutMessages
from services.send_back import DLQ_NUMS_PER_GROUP, dlq_topic, original_topic
from storage import GetMessageStatus, Message, MessageStore, StorageError, StoredMessage
from storage.codec import (
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
)
from storage.config_managers import TopicConfig

PROPERTY_REDRIVEN_FROM: Final = "REDRIVEN_FROM"
_DROPPED_ON_REDRIVE: Final = (
    PROPERTY_DELAY,
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QID,
    PROPERTY_MAX_RECONSUME_TIMES,
)
MAX_REDRIVE: Final = 10_000

TopicForSend = Callable[[str], Awaitable[TopicConfig]]


@dataclass(frozen=True, slots=True)
class DlqFilter:
    """Which dead letters: any of these msg ids, any of these tags, stored in [begin, end]."""

    msg_ids: Collection[str] = ()
    tags: Collection[str] = ()
    begin_ms: int | None = None
    end_ms: int | None = None

    def matches(self, message: StoredMessage) -> bool:
        if (
            self.msg_ids
            and message.msg_id not in self.msg_ids
            and (message.uniq_key not in self.msg_ids)
        ):
            return False
        if self.tags and message.tags not in self.tags:
            return False
        if self.begin_ms is not None and message.store_timestamp < self.begin_ms:
            return False
        return self.end_ms is None or message.store_timestamp <= self.end_ms


@dataclass(frozen=True, slots=True)
class DlqEntry:
    """One dead letter and whether it has been redriven (to where, as which message)."""

    queue_offset: int
    message: StoredMessage
    original_topic: str
    redriven_as: str | None  # msgId of the copy in the target, when already redriven


@dataclass(frozen=True, slots=True)
class DlqPage:
    entries: list[DlqEntry]
    next_offset: int  # where the next page starts
    min_offset: int
    max_offset: int


class RedriveStatus(Enum):
    WOULD_MOVE = "WOULD_MOVE"  # dry run
    MOVED = "MOVED"
    ALREADY_MOVED = "ALREADY_MOVED"  # an earlier run moved it; not sent again
    FAILED = "FAILED"


@dataclass(frozen=True, slots=True)
class RedriveOutcome:
    dlq_msg_id: str
    uniq_key: str
    target_topic: str
    status: RedriveStatus
    new_msg_id: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class RedriveReport:
    group: str
    dry_run: bool
    outcomes: list[RedriveOutcome] = field(default_factory=list)
    scanned: int = 0
    next_offset: int = 0

    def count(self, status: RedriveStatus) -> int:
        return sum(1 for o in self.outcomes if o.status is status)


class DlqService:
    """Browse and redrive one group's dead letters."""

    def __init__(self, store: MessageStore, topic_for_send: TopicForSend, put: PutMessages) -> None:
        self._store = store
        self._topic_for_send = topic_for_send
        self._put = put

    # ------------------------------------------------------------------ browse

    def browse(
        self,
        group: str,
        offset: int | None,
        limit: int,
        selection: DlqFilter | None = None,
        max_bytes: int | None = None,
    ) -> DlqPage:
        """Up to ``limit`` dead letters matching ``selection`` from ``offset`` (default: the
        oldest), their bodies within ``max_bytes`` (the first always), with where the next
        page starts."""
        topic = dlq_topic(group)
        low = self._store.min_offset_in_queue(topic, 0)
        high = self._store.max_offset_in_queue(topic, 0)
        start = max(low, offset or 0)
        entries, next_offset = self._scan(group, start, high, limit, selection, max_bytes)
        return DlqPage(entries, next_offset, low, high)

    def _scan(
        self,
        group: str,
        start: int,
        end: int,
        limit: int,
        selection: DlqFilter | None,
        max_bytes: int | None = None,
    ) -> tuple[list[DlqEntry], int]:
        topic = dlq_topic(group)
        entries: list[DlqEntry] = []
        offset = start
        size = 0
        while offset < end and len(entries) < limit:
            result = self._store.get_message(group, topic, 0, offset, 32)
            if result.status is GetMessageStatus.OFFSET_TOO_SMALL:
                offset = result.next_begin_offset
                continue
            if not result.messages and result.next_begin_offset <= offset:
                break
            for message in result.messages:
                if len(entries) >= limit:
                    return entries, message.queue_offset
                if selection is None or selection.matches(message):
                    size += len(message.body)
                    if entries and max_bytes is not None and size > max_bytes:
                        return entries, message.queue_offset
                    entries.append(self._entry(message, None))
            offset = result.next_begin_offset
        return entries, offset

    def _entry(self, message: StoredMessage, target: str | None) -> DlqEntry:
        destination = target or original_topic(message)
        return DlqEntry(
            message.queue_offset, message, destination, self._find_copy(message, destination)
        )

    def _find_copy(self, dead: StoredMessage, target: str) -> str | None:
        """msgId of an earlier redrive of ``dead`` into ``target``, if there is one."""
        key = dead.uniq_key or dead.msg_id
        for copy in self._store.query_message(target, key, max_num=64):
            if copy.properties.get(PROPERTY_REDRIVEN_FROM) == dead.msg_id:
                return copy.msg_id
        return None

    # ------------------------------------------------------------------ redrive

    async def redrive(
        self,
        group: str,
        selection: DlqFilter,
        target_topic: str | None = None,
        dry_run: bool = False,
        limit: int = 1000,
        rate_per_s: float | None = None,
    ) -> RedriveReport:
        """Re-send the selected dead letters (at most ``limit``), reporting each one."""
        limit = max(1, min(limit, MAX_REDRIVE))
        topic = dlq_topic(group)
        low = self._store.min_offset_in_queue(topic, 0)
        high = self._store.max_offset_in_queue(topic, 0)
        entries, next_offset = self._scan(group, low, high, limit, selection)
        outcomes = []
        pause = 1 / rate_per_s if rate_per_s else 0.0
        for entry in entries:
            outcomes.append(await self._redrive_one(entry, target_topic, dry_run))
            if pause and not dry_run:
                await asyncio.sleep(pause)
        return RedriveReport(group, dry_run, outcomes, len(entries), next_offset)

    async def _redrive_one(
        self, entry: DlqEntry, target_topic: str | None, dry_run: bool
    ) -> RedriveOutcome:
        dead = entry.message
        target = target_topic or entry.original_topic
        uniq_key = dead.uniq_key or dead.msg_id
        copy = self._find_copy(dead, target)
        if copy is not None:
            return RedriveOutcome(
                dead.msg_id, uniq_key, target, RedriveStatus.ALREADY_MOVED, new_msg_id=copy
            )
        if dry_run:
            return RedriveOutcome(dead.msg_id, uniq_key, target, RedriveStatus.WOULD_MOVE)
        try:
            config = await self._topic_for_send(target)
            [result] = await self._put([self._redriven(dead, config, uniq_key)])
        except (StorageError, ServiceError) as exc:  # e.g. target not writeable, disk full
            return RedriveOutcome(
                dead.msg_id, uniq_key, target, RedriveStatus.FAILED, error=f"{exc.code}: {exc}"
            )
        return RedriveOutcome(
            dead.msg_id, uniq_key, target, RedriveStatus.MOVED, new_msg_id=result.msg_id
        )

    @staticmethod
    def _redriven(dead: StoredMessage, target: TopicConfig, uniq_key: str) -> Message:
        properties = {k: v for k, v in dead.properties.items() if k not in _DROPPED_ON_REDRIVE}
        properties[PROPERTY_UNIQ_KEY] = uniq_key
        properties[PROPERTY_REDRIVEN_FROM] = dead.msg_id
        # Same key, same queue: a re-run would pick the queue the first run picked.
        queue_id = zlib.crc32(uniq_key.encode()) % max(1, target.write_queue_nums)
        return Message(
            topic=target.topic_name,
            body=dead.body,
            queue_id=queue_id,
            properties=properties,
            flag=dead.flag,
            born_timestamp=int(time.time() * 1000),
            born_host=dead.born_host,
            reconsume_times=0,
        )


__all__ = [
    "DLQ_NUMS_PER_GROUP",
    "PROPERTY_REDRIVEN_FROM",
    "DlqEntry",
    "DlqFilter",
    "DlqPage",
    "DlqService",
    "RedriveOutcome",
    "RedriveReport",
    "RedriveStatus",
]

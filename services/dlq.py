"""Dead-letter queue: browse a group's ``%DLQ%<group>`` and redrive messages out of it.

Redrive re-sends each selected message to its original topic (``RETRY_TOPIC``) or a named
topic, with ``reconsume_times`` reset to 0 and ``REDRIVEN_FROM`` = the dead letter's msgId.
The dead letter stays stored (the log is append-only; the redrive watermark of
:mod:`services.dlq_watermark` counts it no longer waiting), so nothing is lost if a run stops
midway. A re-run does not send twice: the copy is a re-put keyed by the dead letter
(:meth:`IdempotencyService.reput`, looked up with no time bound), so a later redrive into the
same topic -- or the same one after a crash mid-send -- finds it and reports it moved. The
copy keeps the dead letter's ``UNIQ_KEY``. ``dry_run`` reports what would move where and
changes nothing.

``rate_per_s`` paces the re-sends: the n-th send waits until n / rate seconds after the
first, and nothing waits after the last one. A redrive expected to take longer than
:data:`REDRIVE_PROMPT_S` is refused by :meth:`DlqService.redrive` (a request would be held
open that long) and runs instead as a redrive job (:mod:`services.redrive_jobs`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from services.dlq_watermark import DlqWatermark
from services.errors import (
    BrokerUnavailableError,
    InvalidRequestError,
    RedriveTooLongError,
    ServiceError,
)
from services.idempotency import IdempotencyService
from services.messages import as_shown
from services.send_back import DLQ_NUMS_PER_GROUP, dlq_topic, original_topic
from services.trace.tracer import Tracer
from storage import GetMessageStatus, Message, MessageStore, StorageError, StoredMessage
from storage.config_managers import TopicConfig
from storage.lag_model import DlqDepth
from storage.record.properties import (
    PROPERTY_DELAY,
    PROPERTY_MAX_RECONSUME_TIMES,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_KEY,
)

PROPERTY_REDRIVEN_FROM: Final = "REDRIVEN_FROM"
_DROPPED_ON_REDRIVE: Final = (
    PROPERTY_DELAY,
    PROPERTY_REAL_TOPIC,
    PROPERTY_REAL_QID,
    PROPERTY_MAX_RECONSUME_TIMES,
)
MAX_REDRIVE: Final = 10_000
MIN_REDRIVE_RATE: Final = 0.1
MAX_REDRIVE_RATE: Final = 100_000.0
REDRIVE_PROMPT_S: Final = 30.0
"""The longest expected duration (pending messages / rate) of a redrive answered in one call."""

log = logging.getLogger(__name__)

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


class DlqState(Enum):
    """Which dead letters a browse lists."""

    WAITING = "waiting"  # not redriven yet (from the redrive watermark on)
    REDRIVEN = "redriven"  # redriven to their original topic, still stored
    ALL = "all"


@dataclass(frozen=True, slots=True)
class DlqPage:
    entries: list[DlqEntry]
    next_offset: int  # where the next page starts
    min_offset: int
    max_offset: int
    depth: DlqDepth


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


@dataclass(frozen=True, slots=True)
class RedriveRequest:
    """Which dead letters of a group to redrive, where to, and how fast."""

    group: str
    selection: DlqFilter
    target_topic: str | None = None  # None: each message's original topic
    dry_run: bool = False
    limit: int = 1000
    rate_per_s: float | None = None  # None: as fast as the store takes them


def check_rate(rate_per_s: float | None) -> None:
    """InvalidRequestError unless the rate is None or within the documented range."""
    if rate_per_s is not None and not MIN_REDRIVE_RATE <= rate_per_s <= MAX_REDRIVE_RATE:
        raise InvalidRequestError(
            f"rate_per_second must be from {MIN_REDRIVE_RATE} to {MAX_REDRIVE_RATE:.0f}, "
            f"not {rate_per_s}"
        )


class _Pacer:
    """Spaces sends 1/rate apart: the n-th send waits until n / rate s after the first.

    Only sends take a turn (a message already moved does not), and nothing waits after the
    last send. A wait ends early, with False, when ``stopping`` is set.
    """

    def __init__(self, rate_per_s: float | None, stopping: asyncio.Event) -> None:
        self._interval = 1 / rate_per_s if rate_per_s else 0.0
        self._stopping = stopping
        self._sent = 0
        self._start = 0.0

    async def turn(self) -> bool:
        """Wait for the next send's turn; False when the broker is stopping."""
        if self._sent == 0:
            self._start = time.monotonic()
        elif self._interval:
            delay = self._start + self._sent * self._interval - time.monotonic()
            if delay > 0:
                try:
                    await asyncio.wait_for(self._stopping.wait(), delay)
                except TimeoutError:
                    pass
        self._sent += 1
        return not self._stopping.is_set()


class DlqService:
    """Browse and redrive one group's dead letters."""

    def __init__(
        self,
        store: MessageStore,
        topic_for_send: TopicForSend,
        idempotency: IdempotencyService,
        watermark: DlqWatermark,
        *,
        tracer: Tracer | None = None,
    ) -> None:
        self._tracer = tracer or Tracer.off()
        self._store = store
        self._topic_for_send = topic_for_send
        self._idempotency = idempotency
        self._watermark = watermark
        self._stopping = asyncio.Event()

    # ------------------------------------------------------------------ browse

    def browse(
        self,
        group: str,
        offset: int | None,
        limit: int,
        selection: DlqFilter | None = None,
        max_bytes: int | None = None,
        state: DlqState = DlqState.ALL,
    ) -> DlqPage:
        """Up to ``limit`` dead letters in ``state`` matching ``selection`` from ``offset``
        (default: the oldest, or the watermark for waiting ones), their bodies within
        ``max_bytes`` (the first always), with where the next page starts and the depth."""
        topic = dlq_topic(group)
        low = self._store.min_offset_in_queue(topic, 0)
        high = self._store.max_offset_in_queue(topic, 0)
        start = max(low, offset or 0)
        if state is DlqState.WAITING:
            start = max(start, self._watermark.position(group))
        entries, next_offset = self._scan(
            group, start, high, limit, selection, max_bytes, state=state
        )
        return DlqPage(entries, next_offset, low, high, self._watermark.depth(group))

    def depth(self, group: str) -> DlqDepth:
        return self._watermark.depth(group)  # stored, and how many of them still wait

    def _scan(
        self,
        group: str,
        start: int,
        end: int,
        limit: int,
        selection: DlqFilter | None,
        max_bytes: int | None = None,
        target: str | None = None,
        state: DlqState = DlqState.ALL,
    ) -> tuple[list[DlqEntry], int]:
        """Matching dead letters from ``start``, each with its copy in ``target`` (default:
        its original topic) if it was redriven there, and where a next scan starts."""
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
                    entry = self._entry(message, target)
                    if state is not DlqState.ALL and (
                        (entry.redriven_as is None) != (state is DlqState.WAITING)
                    ):
                        continue
                    size += len(message.body)
                    if entries and max_bytes is not None and size > max_bytes:
                        return entries, message.queue_offset
                    entries.append(entry)
            offset = result.next_begin_offset
        return entries, offset

    def _entry(self, message: StoredMessage, target: str | None) -> DlqEntry:
        destination = target or original_topic(message)
        return DlqEntry(
            message.queue_offset,
            as_shown(message),
            destination,
            self._find_copy(message, destination),
        )

    def _find_copy(self, dead: StoredMessage, target: str) -> str | None:
        """msgId of an earlier redrive of ``dead`` into ``target``, if there is one."""
        copy = self._idempotency.find_reput(target, dead, since_ms=0)
        return copy.msg_id if copy is not None else None

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
        """Re-send the selected dead letters (at most ``limit``), reporting each one.

        RedriveTooLongError when the sends, paced at ``rate_per_s``, would take longer than
        :data:`REDRIVE_PROMPT_S` (start a job instead); BrokerUnavailableError when the broker
        starts shutting down midway (what was sent stays sent; a re-run finishes the rest).
        """
        check_rate(rate_per_s)
        request = RedriveRequest(group, selection, target_topic, dry_run, limit, rate_per_s)
        entries, next_offset = self.select(request)
        self._check_prompt(request, entries)
        outcomes: list[RedriveOutcome] = []
        completed = await self.run(request, entries, outcomes)
        self.advance_watermark(request, outcomes)
        if not completed:
            raise BrokerUnavailableError(
                f"the broker is stopping: {len(outcomes)} of {len(entries)} dead letters were "
                "redriven; run it again to finish (nothing is sent twice)"
            )
        return RedriveReport(group, dry_run, outcomes, len(entries), next_offset)

    def advance_watermark(self, request: RedriveRequest, outcomes: list[RedriveOutcome]) -> None:
        """Move the group's redrive watermark past what is redriven now (not on a dry run)."""
        if request.dry_run:
            return
        moved = {
            o.dlq_msg_id
            for o in outcomes
            if o.status in (RedriveStatus.MOVED, RedriveStatus.ALREADY_MOVED)
        }
        self._watermark.advance(
            request.group,
            lambda dead: (
                dead.msg_id in moved or self._find_copy(dead, original_topic(dead)) is not None
            ),
        )

    def select(self, request: RedriveRequest) -> tuple[list[DlqEntry], int]:
        limit = max(1, min(request.limit, MAX_REDRIVE))
        topic = dlq_topic(request.group)
        low = self._store.min_offset_in_queue(topic, 0)
        high = self._store.max_offset_in_queue(topic, 0)
        return self._scan(
            request.group, low, high, limit, request.selection, target=request.target_topic
        )

    @staticmethod
    def _check_prompt(request: RedriveRequest, entries: list[DlqEntry]) -> None:
        """RedriveTooLongError when the paced sends would outlast :data:`REDRIVE_PROMPT_S`."""
        if request.dry_run or not request.rate_per_s:
            return
        pending = sum(1 for e in entries if e.redriven_as is None)
        expected_s = max(0, pending - 1) / request.rate_per_s
        if expected_s > REDRIVE_PROMPT_S:
            raise RedriveTooLongError(
                f"{pending} dead letters at {request.rate_per_s:g}/s take about "
                f"{expected_s:.0f} s, longer than the {REDRIVE_PROMPT_S:.0f} s a redrive "
                "request may take: start it as a redrive job"
            )

    async def run(
        self, request: RedriveRequest, entries: list[DlqEntry], outcomes: list[RedriveOutcome]
    ) -> bool:
        """Redrive ``entries`` in order, appending each outcome to ``outcomes`` as it comes;
        False when the broker started stopping before the end."""
        pacer = _Pacer(request.rate_per_s, self._stopping)
        for entry in entries:
            outcome = await self._redrive_one(entry, request, pacer)
            if outcome is None:
                return False
            outcomes.append(outcome)
        return True

    async def _redrive_one(
        self, entry: DlqEntry, request: RedriveRequest, pacer: _Pacer
    ) -> RedriveOutcome | None:
        dead = entry.message
        target = request.target_topic or entry.original_topic
        uniq_key = dead.uniq_key or dead.msg_id
        copy = self._find_copy(dead, target)
        if copy is not None:
            return RedriveOutcome(
                dead.msg_id, uniq_key, target, RedriveStatus.ALREADY_MOVED, new_msg_id=copy
            )
        if request.dry_run:
            return RedriveOutcome(dead.msg_id, uniq_key, target, RedriveStatus.WOULD_MOVE)
        if not await pacer.turn():
            return None
        return await self._move(dead, target, uniq_key)

    async def _move(self, dead: StoredMessage, target: str, uniq_key: str) -> RedriveOutcome:
        """Put the copy once: a redrive running at the same time, or one before a crash,
        already made it when the re-put finds it (ALREADY_MOVED)."""
        try:
            config = await self._topic_for_send(target)
            written = await self._idempotency.reput(
                self._redriven(dead, config, uniq_key), dead, since_ms=0
            )
        except (StorageError, ServiceError) as exc:  # e.g. target not writeable, disk full
            return RedriveOutcome(
                dead.msg_id, uniq_key, target, RedriveStatus.FAILED, error=f"{exc.code}: {exc}"
            )
        status = RedriveStatus.ALREADY_MOVED if written.replayed else RedriveStatus.MOVED
        copy = written.results[0]
        if not written.replayed and self._tracer.topic_on(dead.topic):
            self._tracer.redriven(dead, copy, copy.msg_id)
        return RedriveOutcome(
            dead.msg_id, uniq_key, target, status, new_msg_id=written.results[0].msg_id
        )

    # ------------------------------------------------------------------ redrive jobs

    def begin_shutdown(self) -> None:
        """The broker is stopping: paced redrives end after their current send."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

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
    "MAX_REDRIVE",
    "MAX_REDRIVE_RATE",
    "MIN_REDRIVE_RATE",
    "PROPERTY_REDRIVEN_FROM",
    "REDRIVE_PROMPT_S",
    "DlqDepth",
    "DlqEntry",
    "DlqFilter",
    "DlqPage",
    "DlqService",
    "DlqState",
    "RedriveOutcome",
    "RedriveReport",
    "RedriveRequest",
    "RedriveStatus",
    "RedriveTooLongError",
    "check_rate",
]

"""Reading stored messages for the Messages page, and where each group stands on one.

Queue pages come from :meth:`services.messages.MessageQueryService.browse`: looking at a
queue is not consuming it, so it counts no traffic and moves no offset. A seek by time uses
:meth:`services.topics.TopicService.offset_by_time` (the ConsumeQueue's binary search by store
time), as ``GET /v1/topics/{topic}/queues/{queue}/offset`` does.

A search that found more than a page says where the next page starts (:attr:`Found.next`):
after the last message shown in store time order (a time range), after its offset (a queue),
or before the oldest one shown (a key: the index answers the newest matches first).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from app.admin.forms import FormError
from app.admin.lag import group_names
from services import Broker, dlq_topic, retry_topic
from storage.record.message import StoredMessage

MAX_RESULTS: Final = 200
KEY_RESULTS: Final = 64
"""The most messages one key lookup answers (the index's cap)."""
HEX_LIMIT: Final = 64 * 1024
TEXT_LIMIT: Final = 64 * 1024
"""Characters of a body shown as text; a larger body is cut, with a link to download it."""


@dataclass(slots=True)
class Found:
    """Messages a search found, oldest first, whether there were more, and the query
    parameters that open the next page (None when there is none)."""

    messages: list[StoredMessage] = field(default_factory=list)
    truncated: bool = False
    notes: list[str] = field(default_factory=list)
    next: dict[str, str] | None = None


_CURSOR: Final = re.compile(r"^(\d+)(?::(\d+))+$")


class TimePosition(NamedTuple):
    """Where a message sits in a time range's order: store time, queue, queue offset."""

    store_timestamp: int
    queue_id: int
    queue_offset: int

    @classmethod
    def of(cls, message: StoredMessage) -> TimePosition:
        return cls(message.store_timestamp, message.queue_id, message.queue_offset)

    @classmethod
    def parse(cls, text: str) -> TimePosition:
        numbers = _cursor_numbers(text, "after", 3)
        return cls(numbers[0], numbers[1], numbers[2])

    def text(self) -> str:
        return f"{self.store_timestamp}:{self.queue_id}:{self.queue_offset}"


class KeyPosition(NamedTuple):
    """Where a message sits in a key's matches: store time and CommitLog offset."""

    store_timestamp: int
    physical_offset: int

    @classmethod
    def of(cls, message: StoredMessage) -> KeyPosition:
        return cls(message.store_timestamp, message.physical_offset)

    @classmethod
    def parse(cls, text: str) -> KeyPosition:
        numbers = _cursor_numbers(text, "before", 2)
        return cls(numbers[0], numbers[1])

    def text(self) -> str:
        return f"{self.store_timestamp}:{self.physical_offset}"


def _cursor_numbers(text: str, name: str, count: int) -> list[int]:
    """The ``count`` numbers of a page cursor ``n:n:...``; FormError when it is not one."""
    numbers = [int(part) for part in text.split(":")] if _CURSOR.match(text) else []
    if len(numbers) != count:
        raise FormError(name, f"{name} is not a page position (it comes from a page link)")
    return numbers


def by_time(
    broker: Broker,
    topic: str,
    begin_ms: int,
    end_ms: int,
    limit: int,
    after: TimePosition | None = None,
) -> Found:
    """Messages of every queue stored in [begin_ms, end_ms] (after ``after``, when given),
    oldest first; the next page starts after the last one."""
    config = broker.topics.get(topic)
    found = Found()
    for queue_id in range(config.read_queue_nums):
        start = _time_start(broker, topic, queue_id, begin_ms, after)
        page = broker.messages.browse(topic, queue_id, start, limit, end_ms)
        found.messages.extend(
            m for m in page.messages if after is None or TimePosition.of(m) > after
        )
        found.truncated |= page.more
    found.messages.sort(key=TimePosition.of)
    if len(found.messages) > limit:
        del found.messages[limit:]
        found.truncated = True
    if found.truncated and found.messages:
        found.next = {"after": TimePosition.of(found.messages[-1]).text()}
    return found


def _time_start(
    broker: Broker, topic: str, queue_id: int, begin_ms: int, after: TimePosition | None
) -> int:
    """Where a queue's part of a time range starts: the first offset stored at ``begin_ms``
    or later; on a next page, the first one that sorts after ``after``."""
    if after is not None and queue_id == after.queue_id:
        return after.queue_offset + 1
    if after is not None:
        # Same store time: a lower queue sorts before ``after``, a higher one after it.
        begin_ms = max(begin_ms, after.store_timestamp + (queue_id < after.queue_id))
    return broker.topics.offset_by_time(topic, queue_id, begin_ms, at_or_after=True).offset


def by_offset(broker: Broker, topic: str, queue_id: int, offset: int, limit: int) -> Found:
    """Messages of one queue from ``offset`` on; the next page starts after the last one."""
    page = broker.messages.browse(topic, queue_id, offset, limit)
    found = Found(page.messages, page.more)
    low, high = page.min_offset, page.max_offset
    if not low <= offset < high:
        found.notes.append(
            f"queue {queue_id} holds offsets {low} to {high - 1}"
            if high > low
            else f"queue {queue_id} is empty"
        )
    if page.more and page.messages:
        found.next = {"offset": str(page.messages[-1].queue_offset + 1)}
    return found


def by_key(
    broker: Broker,
    topic: str,
    key: str,
    window: tuple[int, int | None],
    limit: int,
    before: KeyPosition | None = None,
) -> Found:
    """The newest messages of ``topic`` with ``key`` (KEYS or UNIQ_KEY) stored in ``window``
    (ms, inclusive; None: until now) and before ``before`` when given, oldest first: at most
    ``limit`` and :data:`KEY_RESULTS`. The next page holds older ones.

    The index keeps times to the second: asked for what was stored up to ``before``'s time,
    it answers the messages of that second after it too. So it is asked for all it gives
    (:data:`KEY_RESULTS`), and those not before ``before`` are left out here.
    """
    begin, end = window
    if before is not None:
        end = before.store_timestamp if end is None else min(end, before.store_timestamp)
    answered = broker.messages.by_key(topic, key, max_messages=KEY_RESULTS, begin=begin, end=end)
    older = [m for m in answered if before is None or KeyPosition.of(m) < before]
    shown = older[-min(limit, KEY_RESULTS) :]
    found = Found(shown, truncated=len(shown) < len(older) or len(answered) == KEY_RESULTS)
    if found.truncated and shown:
        found.next = {"before": KeyPosition.of(shown[0]).text()}
    return found


# ==================================================================== one message


@dataclass(frozen=True, slots=True)
class Consumption:
    """Where one group stands on a message's queue."""

    group: str
    committed_offset: int | None  # None: the group never committed this queue

    def consumed(self, queue_offset: int) -> bool:
        return self.committed_offset is not None and self.committed_offset > queue_offset


def consumption(broker: Broker, message: StoredMessage) -> list[Consumption]:
    """Every group with offsets on the message's topic, and its committed offset on its queue."""
    rows = []
    for group in group_names(broker):
        for topic_lag in broker.offsets.report(group, message.topic):
            committed = {q.queue_id: q.committed_offset for q in topic_lag.queues}
            rows.append(Consumption(group, committed.get(message.queue_id)))
    return rows


@dataclass(frozen=True, slots=True)
class Copy:
    """A retry or dead-letter copy of a message (same UNIQ_KEY) in a group's topic."""

    group: str
    kind: str  # "retry" or "dead letter"
    message: StoredMessage


def copies(broker: Broker, message: StoredMessage, groups: list[str]) -> list[Copy]:
    """The message's retries and dead letters in the topics of ``groups``."""
    key = message.uniq_key
    if not key:
        return []
    existing = {config.topic_name for config in broker.topics.all()}
    found: list[Copy] = []
    for group in groups:
        for kind, topic in (("retry", retry_topic(group)), ("dead letter", dlq_topic(group))):
            if topic in existing and topic != message.topic:
                found.extend(Copy(group, kind, m) for m in broker.messages.by_key(topic, key))
    return found


def hex_dump(data: bytes, limit: int = HEX_LIMIT) -> str:
    """``offset  hex bytes  |ascii|`` lines, 16 bytes each, up to ``limit`` bytes."""
    lines = []
    for start in range(0, min(len(data), limit), 16):
        chunk = data[start : start + 16]
        hex_part = " ".join(f"{b:02x}" for b in chunk[:8])
        if len(chunk) > 8:
            hex_part += "  " + " ".join(f"{b:02x}" for b in chunk[8:])
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{start:08x}  {hex_part:<49}  |{text}|")
    return "\n".join(lines)


def body_text(data: bytes) -> str | None:
    """The body as text when it is UTF-8."""
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None

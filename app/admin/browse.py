"""Reading stored messages for the Messages page, and where each group stands on one.

Queue pages come from :meth:`services.messages.MessageQueryService.browse`: looking at a
queue is not consuming it, so it counts no traffic and moves no offset. A seek by time uses
:meth:`services.topics.TopicService.offset_by_time` (the ConsumeQueue's binary search by store
time), as ``GET /v1/topics/{topic}/queues/{queue}/offset`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from app.admin.lag import group_names
from services import Broker, dlq_topic, retry_topic
from storage.record.message import StoredMessage

MAX_RESULTS: Final = 200
HEX_LIMIT: Final = 64 * 1024
TEXT_LIMIT: Final = 64 * 1024
"""Characters of a body shown as text; a larger body is cut, with a link to download it."""


@dataclass(slots=True)
class Found:
    """Messages a search found, oldest first, and whether there were more."""

    messages: list[StoredMessage] = field(default_factory=list)
    truncated: bool = False
    notes: list[str] = field(default_factory=list)


def by_time(broker: Broker, topic: str, begin_ms: int, end_ms: int, limit: int) -> Found:
    """Messages of every queue stored in [begin_ms, end_ms], oldest first."""
    config = broker.topics.get(topic)
    found = Found()
    for queue_id in range(config.read_queue_nums):
        seek = broker.topics.offset_by_time(topic, queue_id, begin_ms, at_or_after=True)
        page = broker.messages.browse(topic, queue_id, seek.offset, limit, end_ms)
        found.messages.extend(page.messages)
        found.truncated |= page.more
    found.messages.sort(key=lambda m: (m.store_timestamp, m.queue_id, m.queue_offset))
    if len(found.messages) > limit:
        del found.messages[limit:]
        found.truncated = True
    return found


def by_offset(broker: Broker, topic: str, queue_id: int, offset: int, limit: int) -> Found:
    """Messages of one queue from ``offset`` on."""
    page = broker.messages.browse(topic, queue_id, offset, limit)
    found = Found(page.messages, page.more)
    low, high = page.min_offset, page.max_offset
    if not low <= offset < high:
        found.notes.append(
            f"queue {queue_id} holds offsets {low} to {high - 1}"
            if high > low
            else f"queue {queue_id} is empty"
        )
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

"""Trace events: one step in a message's life, and the records of ``RMQ_SYS_TRACE_TOPIC``.

One record is a batch of events written together (the events of one send, one offset
commit, one ack batch): its body is ``{"v": 1, "events": [...]}``; its KEYS let the key index
find every record of a message: for the busy steps (stored, delivered, acked, nacked,
invisibility changed, revived) where the copy concerned is (:func:`position_key`: a few keys
for a whole batch), for the others the message's id; and the messages' own keys. Its TAGS is
the first event's type. A batch too large for one record's KEYS is split over several.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

import orjson

from storage import Message, StoredMessage
from storage.record.properties import KEY_SEPARATOR, PROPERTY_KEYS, PROPERTY_TAGS
from storage.topic_names import TRACE_TOPIC

TRACE_FORMAT_VERSION: Final = 1

EVENT_TYPES: Final = (
    "stored",
    "timer_scheduled",
    "timer_cancelled",
    "timer_fired",
    "transaction_half",
    "transaction_checked",
    "transaction_commit",
    "transaction_rollback",
    "transaction_gave_up",
    "delivered",
    "invisibility_changed",
    "acked",
    "nacked",
    "revived",
    "sent_back",
    "dead_lettered",
    "redriven",
)
"""Every event type, in the order a timeline shows events of the same millisecond."""

TYPE_RANK: Final = {name: rank for rank, name in enumerate(EVENT_TYPES)}

BUCKET_SIZE: Final = 32
"""Offsets of a queue whose busy steps share one index key (see :func:`position_key`)."""
POSITION_KEYED: Final = frozenset(
    {"stored", "delivered", "acked", "nacked", "invisibility_changed", "revived"}
)
"""The busy steps, keyed by where the copy concerned is (a few keys for a batch), not by
message id (a key each); the others are keyed by message id."""

MAX_KEYS_CHARS: Final = 30_000
"""The KEYS of one record stay under this (a record's properties hold at most 32767 bytes)."""

_DROPPED_CHARS: Final = str.maketrans("", "", " \x01\x02")


@dataclass(frozen=True, slots=True)
class Consumer:
    """Who a delivery went to: the token's name, the client's address, its X-Client-Id."""

    token: str | None = None
    address: str | None = None
    client_id: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"token": self.token, "address": self.address, "client_id": self.client_id}


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One step of one message (see the module docstring for the JSON form)."""

    type: str
    at: int  # ms since the epoch, the broker's clock
    msg_id: str  # the message's UNIQ_KEY: the same for its retry and DLQ copies
    topic: str
    queue_id: int = -1
    queue_offset: int = -1
    group: str | None = None
    attempt: int | None = None
    consumer: Consumer | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    keys: tuple[str, ...] = ()  # the message's own KEYS: indexed, not part of the event

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "at": self.at,
            "msg_id": self.msg_id,
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "group": self.group,
            "attempt": self.attempt,
            "consumer": None if self.consumer is None else self.consumer.to_json(),
            "detail": dict(self.detail),
        }

    @property
    def order(self) -> tuple[int, int]:
        """Where the event stands in a timeline: by time, then by type."""
        return (self.at, TYPE_RANK.get(self.type, len(TYPE_RANK)))


def event_from_json(entry: Mapping[str, Any]) -> TraceEvent:
    """An event as a record holds it; ValueError (KeyError, TypeError) when malformed."""
    consumer = entry.get("consumer")
    return TraceEvent(
        type=str(entry["type"]),
        at=int(entry["at"]),
        msg_id=str(entry["msg_id"]),
        topic=str(entry["topic"]),
        queue_id=int(entry.get("queue_id", -1)),
        queue_offset=int(entry.get("queue_offset", -1)),
        group=entry.get("group"),
        attempt=entry.get("attempt"),
        consumer=None if not isinstance(consumer, dict) else Consumer(**consumer),
        detail=dict(entry.get("detail") or {}),
    )


def trace_records(events: Sequence[TraceEvent]) -> list[Message]:
    """The records of one batch of events: one, or more when their keys would not fit."""
    return [_record(part) for part in _parts(events)]


def _parts(events: Sequence[TraceEvent]) -> Iterator[Sequence[TraceEvent]]:
    start, chars = 0, 0
    for index, event in enumerate(events):
        size = sum(len(k) + 1 for k in _event_keys(event))
        if index > start and chars + size > MAX_KEYS_CHARS:
            yield events[start:index]
            start, chars = index, 0
        chars += size
    if start < len(events):
        yield events[start:]


def position_key(topic: str, queue_id: int, offset: int, group: str | None = None) -> str:
    """The key of the trace records of a queue's offsets ``offset // BUCKET_SIZE``
    (``topic@queue@bucket``), and of one group's steps there (``...@group``)."""
    key = f"{topic}@{queue_id}@{offset // BUCKET_SIZE}"
    return key if group is None else f"{key}@{group}"


def _event_keys(event: TraceEvent) -> Iterator[str]:
    if event.type in POSITION_KEYED and event.queue_offset >= 0:
        group = None if event.type == "stored" else event.group
        yield position_key(event.topic, event.queue_id, event.queue_offset, group)
    else:
        yield event.msg_id
    new_id = event.detail.get("new_msg_id")
    if isinstance(new_id, str):
        yield new_id
    for key in event.keys:
        cleaned = key.translate(_DROPPED_CHARS)
        if cleaned:
            yield cleaned


def record_keys(events: Iterable[TraceEvent]) -> str:
    """The KEYS property of a record holding ``events``: each key once, in order."""
    keys = dict.fromkeys(key for event in events for key in _event_keys(event))
    return KEY_SEPARATOR.join(keys)


def _record(events: Sequence[TraceEvent]) -> Message:
    body = orjson.dumps({"v": TRACE_FORMAT_VERSION, "events": [e.to_json() for e in events]})
    properties = {PROPERTY_KEYS: record_keys(events), PROPERTY_TAGS: events[0].type}
    return Message(TRACE_TOPIC, body, 0, properties, born_timestamp=events[-1].at)


class EventTexts(NamedTuple):
    """A batch of events already in their JSON form (the hot steps: a send's ``stored``, a
    commit's ``delivered`` and ``acked``), with the record's keys and tag."""

    texts: list[str]
    keys: list[str]
    tag: str
    at: int

    def record(self) -> Message:
        body = b'{"v":1,"events":[' + ",".join(self.texts).encode() + b"]}"
        keys = KEY_SEPARATOR.join(dict.fromkeys(self.keys))
        properties = {PROPERTY_KEYS: keys, PROPERTY_TAGS: self.tag}
        return Message(TRACE_TOPIC, body, 0, properties, born_timestamp=self.at)


def json_text(value: object) -> str:
    """``value`` as JSON text (to put into an event's text)."""
    return orjson.dumps(value).decode()


def id_text(msg_id: str) -> str:
    """A message id as a JSON string: as it is when it is plain hex (as ids are)."""
    return f'"{msg_id}"' if msg_id.isalnum() else json_text(msg_id)


def events_of(record: StoredMessage) -> list[TraceEvent]:
    """The events a trace record holds; none when its body is not a trace batch."""
    try:
        document = orjson.loads(record.body)
        entries = document["events"] if isinstance(document, dict) else []
        return [event_from_json(entry) for entry in entries]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return []

"""A message's timeline: its trace events from the key index, and what has not happened yet.

The events are those of the trace records the key index finds under the message's id and
under where each copy of it is (its topic's queue, a retry, dead-letter or redriven copy's),
in order. Each group that has consumed from the
message's topic gets a state: from its last event (acked, dead-lettered, in flight), or from
the live state when no event names it -- its committed offset still before the message
(waiting: how far behind), or a POP receive not answered yet (in flight).
"""

from __future__ import annotations

import string
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from services.errors import InvalidMessageIdError, MessageNotFoundError
from services.pop.inflight import InFlightTable
from services.trace.events import TraceEvent, events_of, position_key
from services.trace.switch import TraceSwitch, original_topic
from storage import StoredMessage
from storage.config_managers import ConsumerOffsetManager
from storage.record.properties import PROPERTY_RETRY_TOPIC, PROPERTY_UNIQ_KEY
from storage.topic_names import (
    RETRY_GROUP_TOPIC_PREFIX,
    TRACE_TOPIC,
    is_group_topic,
    is_retry_topic,
)

_HEX: Final = frozenset(string.hexdigits)
MAX_RECORDS: Final = 64
"""Trace records read per id (the key index's cap on one query)."""

_STATE_OF: Final = {
    "acked": "acked",
    "dead_lettered": "dead_lettered",
    "delivered": "in_flight",
    "invisibility_changed": "in_flight",
    "nacked": "retrying",
    "revived": "retrying",
    "sent_back": "retrying",
}

QueryByKey = Callable[[str, str, int], list[StoredMessage]]
"""The store's key lookup: records of a topic under a key, at most n, oldest first."""
FindMessage = Callable[[str], StoredMessage | None]
"""The stored message an id (UNIQ_KEY or offsetMsgId) names, None when there is none."""


@dataclass(frozen=True, slots=True)
class GroupState:
    """Where one group stands with the message."""

    group: str
    state: str  # acked | in_flight | retrying | waiting | dead_lettered | consumed
    gap: str | None  # what has not happened yet


@dataclass(frozen=True, slots=True)
class Timeline:
    """A message's trace, in order, and each group's state."""

    msg_id: str
    topic: str
    events: list[TraceEvent]
    groups: list[GroupState]
    tracing: str  # on | off | sampled_out


def clock_text(ms: int) -> str:
    """``12:00:01.002`` (UTC) for a time in ms."""
    return time.strftime("%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}"


class TraceLookup:
    """Builds timelines from the trace topic and the live state."""

    def __init__(
        self,
        query: QueryByKey,
        topics: Callable[[], list[str]],
        find: FindMessage,
        offsets: ConsumerOffsetManager,
        in_flight: Callable[[], InFlightTable],
        switch: TraceSwitch,
    ) -> None:
        self._query = query
        self._topics = topics
        self._find = find
        self._offsets = offsets
        self._in_flight = in_flight
        self._switch = switch

    def by_key(self, key: str) -> Timeline:
        """The timeline of the first message a business key (or id) names in the trace."""
        for record in self._query(TRACE_TOPIC, key, MAX_RECORDS):
            events = events_of(record)
            for event in events:
                if event.msg_id == key or key in event.detail.get("keys", ()):
                    return self.timeline(event.msg_id)
            if len({event.msg_id for event in events}) == 1:
                return self.timeline(events[0].msg_id)
        if self._find(key) is not None:  # the key is a message's id
            return self.timeline(key)
        raise MessageNotFoundError(f"no traced message has the key {key!r}")

    def by_id(self, msg_id: str) -> Timeline:
        """:meth:`timeline` of an id as the API takes it: 32 or 56 hex characters (else
        InvalidMessageIdError), in either case."""
        if len(msg_id) not in (32, 56) or not _HEX.issuperset(msg_id):
            raise InvalidMessageIdError(
                f"a message id is 32 or 56 hex characters, not {msg_id[:64]!r}"
            )
        return self.timeline(msg_id.upper())

    def timeline(self, msg_id: str) -> Timeline:
        """The timeline of the message ``msg_id`` (its UNIQ_KEY, or its offsetMsgId)."""
        stored = self._find(msg_id)
        if stored is not None:
            msg_id = stored.properties.get(PROPERTY_UNIQ_KEY, msg_id)
        events = self._events(msg_id)
        if stored is None and not events:
            raise MessageNotFoundError(f"message {msg_id} does not exist (or has expired)")
        topic = _topic_of(stored, events)
        return Timeline(
            msg_id,
            topic,
            events,
            self._groups(stored, topic, events),
            self._switch.state(topic, msg_id),
        )

    def _events(self, msg_id: str) -> list[TraceEvent]:
        seen: set[tuple[object, ...]] = set()
        found: list[TraceEvent] = []
        for key in self._keys_of(msg_id):
            for record in self._query(TRACE_TOPIC, key, MAX_RECORDS):
                for event in events_of(record):
                    if event.msg_id != msg_id:
                        continue
                    identity = (event.type, event.at, event.topic, event.queue_offset, event.group)
                    if identity not in seen:
                        seen.add(identity)
                        found.append(event)
        found.sort(key=lambda e: e.order)
        return found

    def _keys_of(self, msg_id: str) -> list[str]:
        """The index keys of the message's trace records: its id, and where each of its
        copies is (for each group that consumes there)."""
        keys = [msg_id]
        groups = self._offsets.topic_groups()
        for topic in self._topics():
            if topic == TRACE_TOPIC:
                continue
            for copy in self._query(topic, msg_id, MAX_RECORDS):
                if copy.properties.get(PROPERTY_UNIQ_KEY) != msg_id:
                    continue
                where = (copy.topic, copy.queue_id, copy.queue_offset)
                keys.append(position_key(*where))
                keys += [position_key(*where, g.group) for g in groups if g.topic == topic]
                if is_retry_topic(topic):
                    keys.append(position_key(*where, topic[len(RETRY_GROUP_TOPIC_PREFIX) :]))
        return list(dict.fromkeys(keys))

    def _groups(
        self, stored: StoredMessage | None, topic: str, events: list[TraceEvent]
    ) -> list[GroupState]:
        states: dict[str, GroupState] = {}
        for event in events:
            state = _STATE_OF.get(event.type)
            if event.group is not None and state is not None:
                states[event.group] = GroupState(event.group, state, None)
        if stored is not None and not is_group_topic(stored.topic):
            self._live(stored, states)
        return sorted(states.values(), key=lambda s: s.group)

    def _live(self, stored: StoredMessage, states: dict[str, GroupState]) -> None:
        """The groups of the message's topic that no event names yet."""
        topic, queue_id, offset = stored.topic, stored.queue_id, stored.queue_offset
        at = clock_text(stored.store_timestamp)
        table = self._in_flight()
        for pair in self._offsets.topic_groups():
            if pair.topic != topic or pair.group in states:
                continue
            group = pair.group
            entry = table.entry((group, topic, queue_id), offset)
            if entry is not None:
                states[group] = GroupState(
                    group,
                    "in_flight",
                    f"received by group {group} at {clock_text(entry.pop_time_ms)} "
                    f"(attempt {entry.attempt}), not acked yet: invisible until "
                    f"{clock_text(entry.deadline_ms)}",
                )
                continue
            committed = self._offsets.query_offset(group, topic, queue_id)
            if committed <= offset:
                behind = offset - max(committed, 0) + 1
                states[group] = GroupState(
                    group,
                    "waiting",
                    f"stored {at}, not yet delivered to group {group}: its offset is "
                    f"{behind} behind",
                )
            else:
                states[group] = GroupState(group, "consumed", None)


def _topic_of(stored: StoredMessage | None, events: list[TraceEvent]) -> str:
    if stored is not None:
        return original_topic(stored.topic, stored.properties.get(PROPERTY_RETRY_TOPIC))
    for event in events:
        if event.type in ("stored", "timer_scheduled", "transaction_half"):
            return event.topic
    return events[0].topic if events else ""

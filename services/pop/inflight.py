"""In-memory POP state: per (group, topic, queue) the pop offset and the in-flight messages.

Touched from the event loop thread only. Everything here can be rebuilt from the revive topic
(:func:`services.pop.rebuild.rebuild`): the CKs give what was taken, the ACKs what is done,
the RESETs what an offset reset or a group delete dropped.

The group's committed offset of a queue (consumerOffset.json, what the lag report reads) is
the lowest offset still in flight, or the pop offset when nothing is: lag counts from the
lowest un-acked message.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field

QueueKey = tuple[str, str, int]  # (group, topic, queue id)


@dataclass(slots=True)
class InFlight:
    """One message taken by a receive and not done yet."""

    offset: int
    ck_id: str
    deadline_ms: int  # invisible until then
    attempt: int  # delivery attempt of the current CK (1 on the first delivery)
    floor: int  # the revive queue's offset before its CK was appended (a lower bound)
    pop_time_ms: int
    holder: str = ""
    ready: bool = False  # FIFO: its invisibility ended; it is delivered again first
    busy: bool = False  # an ack, give-back or revive of it is being written


@dataclass(slots=True)
class QueueState:
    """One queue's pop offset and in-flight messages (change ``entries`` by add/remove only).

    ``offset_heap`` holds every in-flight offset (and some already done, dropped when they
    reach its top), so that the lowest one is found without a scan of the in-flight set: a
    receive and an ack cost the same with 40,000 messages in flight as with 10.
    """

    pop_offset: int
    entries: dict[int, InFlight] = field(default_factory=dict)
    offset_heap: list[int] = field(default_factory=list, repr=False)

    def add(self, entry: InFlight) -> None:
        """Add an in-flight message, or replace the one at its offset."""
        if entry.offset not in self.entries:
            heapq.heappush(self.offset_heap, entry.offset)
        self.entries[entry.offset] = entry

    def remove(self, offset: int) -> None:
        del self.entries[offset]
        if len(self.offset_heap) > 2 * len(self.entries) + 64:
            # Done offsets held below a long-lived one: rebuild rather than grow without end.
            self.offset_heap = sorted(self.entries)

    def lowest_unresolved(self) -> int:
        """Where the group's lag counts from: the oldest offset not done."""
        heap = self.offset_heap
        while heap and heap[0] not in self.entries:
            heapq.heappop(heap)
        return heap[0] if heap else self.pop_offset

    def held(self) -> bool:
        """FIFO: someone holds a message of the queue (in flight and not due again)."""
        return any(not e.ready for e in self.entries.values())

    def ready_entries(self) -> list[InFlight]:
        return [self.entries[o] for o in sorted(self.entries) if self.entries[o].ready]


@dataclass(frozen=True, slots=True)
class Due:
    """A deadline in the revive heap (stale once its entry changed CK or is gone)."""

    key: QueueKey
    offset: int
    ck_id: str


class InFlightTable:
    """The pop offsets, in-flight messages and a heap of their deadlines."""

    def __init__(self, recent_acks: int = 100_000) -> None:
        self.queues: dict[QueueKey, QueueState] = {}
        self._heap: list[tuple[int, int, Due]] = []
        self._seq = 0
        self._recent: deque[tuple[str, int, str]] = deque(maxlen=recent_acks)
        self._recent_set: set[tuple[str, int, str]] = set()

    def queue(self, key: QueueKey) -> QueueState | None:
        return self.queues.get(key)

    def ensure(self, key: QueueKey, start: int) -> QueueState:
        state = self.queues.get(key)
        if state is None:
            state = self.queues[key] = QueueState(start)
        return state

    def restart(self, key: QueueKey, pop_offset: int) -> QueueState:
        """The queue starts again at ``pop_offset`` with nothing in flight (an offset reset);
        the deadlines of what was in flight go stale in the heap."""
        state = self.queues[key] = QueueState(pop_offset)
        return state

    def forget(self, group: str) -> list[QueueKey]:
        """Drop every queue of ``group`` (the group was deleted); returns their keys."""
        keys = [key for key in self.queues if key[0] == group]
        for key in keys:
            del self.queues[key]
        return keys

    def entry(self, key: QueueKey, offset: int) -> InFlight | None:
        state = self.queues.get(key)
        return None if state is None else state.entries.get(offset)

    def put(self, key: QueueKey, entry: InFlight) -> None:
        """Add (or replace) an in-flight message and schedule its deadline."""
        state = self.ensure(key, entry.offset)
        state.add(entry)
        state.pop_offset = max(state.pop_offset, entry.offset + 1)
        self.schedule(key, entry)

    def schedule(self, key: QueueKey, entry: InFlight) -> None:
        self._seq += 1
        heapq.heappush(
            self._heap, (entry.deadline_ms, self._seq, Due(key, entry.offset, entry.ck_id))
        )

    def resolve(self, key: QueueKey, offset: int, ck_id: str, *, acked: bool = False) -> bool:
        """The message is done (acked, revived, dead-lettered); False when ``ck_id`` is stale."""
        state = self.queues.get(key)
        entry = None if state is None else state.entries.get(offset)
        if state is None or entry is None or entry.ck_id != ck_id:
            return False
        state.remove(offset)
        if acked:
            self.remember_ack(ck_id, offset)
        return True

    def remember_ack(self, ck_id: str, offset: int) -> None:
        """Keep recent acks, so that repeating an ack answers ``acked`` again."""
        self._remember(ck_id, offset, "ack")

    def remember_replaced(self, ck_id: str, offset: int) -> None:
        """Keep recent handles replaced by a change of invisibility or a give-back."""
        self._remember(ck_id, offset, "replaced")

    def was_acked(self, ck_id: str, offset: int) -> bool:
        return (ck_id, offset, "ack") in self._recent_set

    def was_replaced(self, ck_id: str, offset: int) -> bool:
        return (ck_id, offset, "replaced") in self._recent_set

    def _remember(self, ck_id: str, offset: int, what: str) -> None:
        item = (ck_id, offset, what)
        if item in self._recent_set:
            return
        if len(self._recent) == self._recent.maxlen:
            self._recent_set.discard(self._recent[0])
        self._recent.append(item)
        self._recent_set.add(item)

    # ------------------------------------------------------------------ deadlines

    def next_deadline(self) -> int | None:
        """The earliest deadline still current (stale heap items are dropped on the way)."""
        while self._heap:
            deadline, _, due = self._heap[0]
            entry = self.entry(due.key, due.offset)
            if entry is not None and entry.ck_id == due.ck_id and not entry.ready:
                return deadline
            heapq.heappop(self._heap)
        return None

    def pop_due(self, now_ms: int) -> list[Due]:
        """Every current deadline at or before ``now_ms``, earliest first."""
        due = []
        while self._heap and self._heap[0][0] <= now_ms:
            _, _, item = heapq.heappop(self._heap)
            entry = self.entry(item.key, item.offset)
            if entry is not None and entry.ck_id == item.ck_id and not entry.ready:
                due.append(item)
        return due

    # ------------------------------------------------------------------ views

    def floor(self) -> int | None:
        """The lowest revive-queue offset an unresolved CK can have; None when none is."""
        floors = [e.floor for s in self.queues.values() for e in s.entries.values()]
        return min(floors) if floors else None

    def in_flight(self, group: str | None = None) -> int:
        return sum(len(s.entries) for k, s in self.queues.items() if group is None or k[0] == group)

    def committed(self) -> dict[QueueKey, int]:
        return {key: state.lowest_unresolved() for key, state in self.queues.items()}

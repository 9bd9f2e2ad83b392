"""Delayed delivery: move due messages from ``SCHEDULE_TOPIC_XXXX`` to their real topic.

The store puts a message with ``DELAY`` = level into queue ``level - 1`` of the schedule
topic; the ConsumeQueue's tags code of that unit is its delivery time. One task per level
walks its queue in order: a unit that is not due yet is waited for until its time (every
later unit of the same level is due later still), an empty queue is waited on until the
store dispatches a new unit into it. A due message is re-put to ``REAL_TOPIC`` /
``REAL_QID`` without ``DELAY``; only after that put succeeded does the level's offset in
``delayOffset.json`` move on, so a crash never loses a due message. The delivery is a re-put
keyed by the schedule record (:meth:`IdempotencyService.reput`): when a crash comes before
the offset is saved (every 10 s), the delivery after the restart finds the copy already
made inside the window instead of storing a second one.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable

from services.background import BackgroundLoop, OnFailure
from services.idempotency import RePut
from storage import Message, MessageStore, StorageError
from storage.config_managers import DelayOffsetManager
from storage.delay_levels import SCHEDULE_TOPIC, delay_level_to_queue_id, queue_id_to_delay_level
from storage.record.message import StoredMessage
from storage.record.properties import PROPERTY_DELAY, PROPERTY_REAL_QID, PROPERTY_REAL_TOPIC

log = logging.getLogger(__name__)

Clock = Callable[[], float]

RETRY_AFTER_FAILED_PUT_S = 0.1  # RocketMQ's DELAY_FOR_A_WHILE
PERSIST_INTERVAL_S = 10.0  # flushDelayOffsetInterval


def due_message(stored: StoredMessage) -> Message | None:
    """The message to deliver for a schedule record (``messageTimeup``); None if it has no
    real topic. ``REAL_TOPIC``/``REAL_QID`` stay in the properties, as in RocketMQ."""
    real_topic = stored.properties.get(PROPERTY_REAL_TOPIC)
    real_queue = stored.properties.get(PROPERTY_REAL_QID, "0")
    if not real_topic or not real_queue.isdigit():
        return None
    properties = {k: v for k, v in stored.properties.items() if k != PROPERTY_DELAY}
    return Message(
        topic=real_topic,
        body=stored.body,
        queue_id=int(real_queue),
        properties=properties,
        flag=stored.flag,
        sys_flag=stored.sys_flag,
        born_timestamp=stored.born_timestamp,
        born_host=stored.born_host,
        reconsume_times=stored.reconsume_times,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class LevelProgress:
    """Where one level stands."""

    level: int
    delay_ms: int
    next_offset: int
    max_offset: int

    @property
    def waiting(self) -> int:
        return max(0, self.max_offset - self.next_offset)


class DelayScheduler:
    """Delivers delayed messages, one task per level."""

    def __init__(
        self,
        store: MessageStore,
        offsets: DelayOffsetManager,
        reput: RePut,
        clock: Clock = time.time,
        persist_interval: float = PERSIST_INTERVAL_S,
    ) -> None:
        self._store = store
        self._offsets = offsets
        self._reput = reput
        self._clock = clock
        self._levels = store.delay_levels
        self._arrived = {level: asyncio.Event() for level in range(1, len(self._levels) + 1)}
        self._loops = [
            *map(self._level_loop, self._arrived),
            BackgroundLoop("delay-persist", self._persist_offsets, persist_interval),
        ]

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Clamp the stored offsets into each queue's range and start the level tasks."""
        self._correct_offsets()
        self._store.arrival_listeners.append(self._on_arrival)
        for loop in self._loops:
            loop.start()

    async def stop(self) -> None:
        """Stop the tasks and write ``delayOffset.json``."""
        with contextlib.suppress(ValueError):
            self._store.arrival_listeners.remove(self._on_arrival)
        await asyncio.gather(*(loop.stop() for loop in self._loops))
        await asyncio.to_thread(self._offsets.persist)

    def progress(self) -> list[LevelProgress]:
        return [
            LevelProgress(
                level,
                delay,
                self._offsets.get(level),
                self._store.max_offset_in_queue(SCHEDULE_TOPIC, delay_level_to_queue_id(level)),
            )
            for level, delay in enumerate(self._levels, start=1)
        ]

    def _correct_offsets(self) -> None:
        for level in self._arrived:
            queue_id = delay_level_to_queue_id(level)
            low = self._store.min_offset_in_queue(SCHEDULE_TOPIC, queue_id)
            high = self._store.max_offset_in_queue(SCHEDULE_TOPIC, queue_id)
            current = self._offsets.get(level)
            corrected = min(max(current, low), high)
            if corrected != current:
                self._offsets.update(level, corrected)

    def _on_arrival(self, topic: str, queue_id: int, max_offset: int, tags_code: int) -> None:
        if topic == SCHEDULE_TOPIC:
            event = self._arrived.get(queue_id_to_delay_level(queue_id))
            if event is not None:
                event.set()

    # ------------------------------------------------------------------ delivery

    def _level_loop(self, level: int) -> BackgroundLoop:
        """The task of one level: each step waits for its next due unit itself (no pause
        between steps); a bug must not stop delayed delivery for good."""
        return BackgroundLoop(
            f"delay-{level}",
            functools.partial(self._deliver_next, level),
            0,
            step_first=True,
            on_failure=OnFailure(
                log,
                f"delayed delivery of level {level} failed; retrying",
                RETRY_AFTER_FAILED_PUT_S,
            ),
        )

    async def _deliver_next(self, level: int) -> None:
        """Deliver the unit at the level's offset, or wait until there is one that is due."""
        queue_id = delay_level_to_queue_id(level)
        offset = self._offsets.get(level)
        unit = self._unit(queue_id, offset)
        if unit is None:
            await self._wait_for_arrival(level, queue_id, offset)
            return
        physical_offset, _, deliver_at = unit
        now = int(self._clock() * 1000)
        delay = self._levels[level - 1]
        if deliver_at > now + delay:
            deliver_at = now  # the clock went back: do not hold the message for longer
        if deliver_at > now:
            await asyncio.sleep((deliver_at - now) / 1000)
            return
        stored = self._store.look_message_by_offset(physical_offset)
        if stored is not None and not await self._deliver(stored):
            await asyncio.sleep(RETRY_AFTER_FAILED_PUT_S)
            return
        self._offsets.update(level, offset + 1)

    async def _deliver(self, stored: StoredMessage) -> bool:
        """Put the due message of schedule record ``stored`` once; False to try again."""
        message = due_message(stored)
        if message is None:
            return True  # no real topic: nothing to deliver
        try:
            await self._reput(message, stored)
        except StorageError as exc:
            log.warning("delayed message to %s not delivered yet: %s", message.topic, exc)
            return False
        return True

    def _unit(self, queue_id: int, offset: int) -> tuple[int, int, int] | None:
        queue = self._store.find_consume_queue(SCHEDULE_TOPIC, queue_id)
        if queue is None or offset >= queue.max_offset:
            return None
        if offset < queue.min_offset:
            return None
        return queue.get_unit(offset)

    async def _wait_for_arrival(self, level: int, queue_id: int, offset: int) -> None:
        queue = self._store.find_consume_queue(SCHEDULE_TOPIC, queue_id)
        if queue is not None and offset < queue.min_offset:
            self._offsets.update(level, queue.min_offset)  # expired under us: skip ahead
            return
        event = self._arrived[level]
        event.clear()
        if self._unit(queue_id, offset) is None:
            await event.wait()

    async def _persist_offsets(self) -> None:
        try:
            await asyncio.to_thread(self._offsets.persist_if_dirty)
        except OSError:
            log.exception("could not persist delayOffset.json; will retry")

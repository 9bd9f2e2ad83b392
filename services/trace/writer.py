"""The trace writer: events wait in a bounded queue; one background task stores them.

Nothing here runs in a request: a hook hands a batch of events (or a function that makes
them, for work such as reading the messages an offset commit covers) to :meth:`TraceWriter.offer`
and returns. The task takes what waits, makes each batch's records and appends them to
``RMQ_SYS_TRACE_TOPIC`` through the store's put, the topic's config made before its first
record (one queue: readable over HTTP by admins, as the Spark latency report reads it). A
batch that does not fit in the queue, or that the store refuses, is dropped and counted
(``Metrics.trace_events_dropped``), never retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from services.appender import PutMessages
from services.background import BackgroundLoop, OnFailure
from services.metrics import Metrics
from services.trace.events import EventTexts, TraceEvent, trace_records
from storage import Message
from storage.config_managers import PERM_READ, PERM_WRITE, TopicConfig
from storage.topic_names import TRACE_TOPIC

log = logging.getLogger(__name__)

DEFAULT_CAPACITY: Final = 100_000
"""Events waiting at most; more are dropped."""
STOP_WRITE_S: Final = 5.0
"""How long a stop waits for the last events to be stored."""
GATHER_S: Final = 0.01
"""How long the writer lets batches gather before it stores them."""
RECORDS_PER_PUT: Final = 64
"""Trace records appended by one put at most."""

Events = Sequence[TraceEvent] | EventTexts
Making = Callable[[], Events]
"""Makes a batch's events in the writer's task (reads the store if it must)."""
Batch = Events | Making
EnsureTopic = Callable[[TopicConfig], Awaitable[None]]
"""Creates a topic the broker owns unless it exists (``TopicService.ensure``)."""
TRACE_TOPIC_CONFIG: Final = TopicConfig(TRACE_TOPIC, 1, 1, perm=PERM_READ | PERM_WRITE)


class TraceWriter:
    """Stores offered batches of events in the background, one batch to one record."""

    def __init__(
        self,
        put: PutMessages,
        metrics: Metrics,
        ensure_topic: EnsureTopic,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self._put = put
        self._ensure_topic = ensure_topic
        self._topic_made = False
        self._metrics = metrics
        self._capacity = capacity
        self._pending: deque[tuple[int, Batch]] = deque()
        self._waiting = 0  # events (or the announced size of a making batch) in _pending
        self._loop = BackgroundLoop(
            "trace-writer",
            self._write_gathered,
            None,
            on_failure=OnFailure(log, "writing trace records failed"),
        )

    @property
    def waiting(self) -> int:
        """Events offered and not stored yet."""
        return self._waiting

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        """Stop the task, then store what still waits within ``STOP_WRITE_S`` (what the store
        refuses, or does not take in time, is dropped)."""
        await self._loop.stop()
        try:
            async with asyncio.timeout(STOP_WRITE_S):
                await self.write_pending()
        except TimeoutError:
            log.warning("trace events still waiting at stop were dropped")
        self._metrics.trace_events_dropped["not_stored"] += self._waiting
        self._pending.clear()
        self._waiting = 0

    async def _write_gathered(self) -> None:
        """Let batches gather for ``GATHER_S`` after the first, then store them together:
        one put of many records costs little more than a put of one."""
        await asyncio.sleep(GATHER_S)
        await self.write_pending()

    def offer(self, batch: Batch, size: int | None = None) -> None:
        """Queue one batch (``size``: its events, for a making batch); dropped when full."""
        if size is not None:
            count = size
        elif isinstance(batch, EventTexts):
            count = len(batch.texts)
        else:
            count = len(batch)  # type: ignore[arg-type]
        if self._waiting + count > self._capacity:
            self._metrics.trace_events_dropped["queue_full"] += count
            return
        self._pending.append((count, batch))
        self._waiting += count
        self._loop.wake()

    async def write_pending(self) -> None:
        """Store every batch waiting now, ``RECORDS_PER_PUT`` records a put."""
        records: list[Message] = []
        counts: list[int] = []
        while self._pending:
            size, batch = self._pending.popleft()
            self._waiting -= size
            made, count = self._made(batch, size)
            if not made:
                continue
            records += made
            counts += [count] + [0] * (len(made) - 1)
            if len(records) >= RECORDS_PER_PUT:
                await self._store(records, counts)
                records, counts = [], []
        if records:
            await self._store(records, counts)

    def _made(self, batch: Batch, size: int) -> tuple[list[Message], int]:
        """The records of ``batch`` and its events' count."""
        try:
            events = batch() if callable(batch) else batch
            if isinstance(events, EventTexts):
                return ([events.record()], len(events.texts)) if events.texts else ([], 0)
            return trace_records(events), len(events)
        except Exception:
            log.exception("making trace records failed")
            self._metrics.trace_events_dropped["not_stored"] += size
            return [], 0

    async def _store(self, records: list[Message], counts: list[int]) -> None:
        events = sum(counts)
        try:
            if not self._topic_made:
                await self._ensure_topic(TRACE_TOPIC_CONFIG)
                self._topic_made = True
            await self._put(records)
        except Exception as exc:
            log.warning("%d trace events not stored: %s", events, exc)
            self._metrics.trace_events_dropped["not_stored"] += events
            return
        self._metrics.trace_events_written += events

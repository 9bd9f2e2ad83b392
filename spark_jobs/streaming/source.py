"""The ``spoolmq`` source's readers: a micro-batch stream and a bounded batch read.

The driver (``latestOffset``, ``partitions``, ``commit``) asks a broker or the proxy for
each subscribed queue's min and max offsets, cuts each queue's range into pieces of at most
``maxOffsetsPerPartition`` offsets and about ``maxBytesPerPartition`` bytes (the size of a
range's first records tells how many offsets that is), and gathers the pieces, in queue
order, into partitions of about that many bytes (at least ``minPartitions``): a Spark task
costs more than reading a small range. The executors read the planned ranges as raw records
(:mod:`spark_jobs.streaming.fetch`). Nothing needs a shared disk.

A queue whose max offset falls below the query's position (a replica behind its master
answered, or a failover dropped messages nobody acknowledged) keeps that position until it
passes it again: nothing is read twice.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_jobs.errors import SpoolmqError
from spark_jobs.http_client import SpoolmqClient
from spark_jobs.streaming.discovery import (
    LossCase,
    QueueStates,
    at_head,
    discover,
    group_of,
    resolve,
    skip_lost,
    wait_for_arrival,
    with_new_queues,
)
from spark_jobs.streaming.fetch import bytes_per_offset, fetch_range
from spark_jobs.streaming.offsets import (
    Positions,
    QueueRange,
    cap,
    from_json,
    pack_ranges,
    plan_ranges,
    to_json,
)
from spark_jobs.streaming.options import SourceOptions

LOG = logging.getLogger("spark_jobs.streaming")
UNKNOWN_OFFSET_BYTES = 1024
"""The bytes an offset is taken to hold where its queue's records could not be sampled."""


class _Reads:
    """What both readers share: the options, a driver-side client, and ``read``."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client: SpoolmqClient | None = None

    def __getstate__(self) -> dict[str, Any]:  # executors open their own clients
        return {"options": self.options, "_client": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def client(self) -> SpoolmqClient:
        if self._client is None:
            self._client = SpoolmqClient(self.options.connection)
        return self._client

    def discover(self) -> QueueStates:
        return discover(self.client, self.options.subscription)

    def plan(
        self, begin: Positions, end: Positions, states: QueueStates, case: LossCase
    ) -> list[InputPartition]:
        """Partitions for [begin, end): retention's losses handled (``case`` says where
        ``begin`` came from), large ranges cut."""
        for key in end:  # a queue found after ``begin`` was fixed starts at its min offset
            if key not in begin and key in states:
                begin[key] = states[key].min_offset
        begin = skip_lost(begin, states, case, self.options.fail_on_data_loss)
        groups = group_of(states)
        options = self.options
        per_offset = self.bytes_per_offset(begin, end, groups)
        byte_limits = {
            key: max(1, int(options.max_bytes_per_partition // size))
            for key, size in per_offset.items()
            if size > 0
        }
        ranges = plan_ranges(
            begin,
            end,
            groups,
            options.max_offsets_per_partition,
            options.min_partitions,
            byte_limits,
        )
        sizes = [
            r.size * per_offset.get((r.topic, r.queue_id), UNKNOWN_OFFSET_BYTES) for r in ranges
        ]
        packed = pack_ranges(ranges, sizes, options.max_bytes_per_partition, options.min_partitions)
        return [InputPartition(part) for part in packed]

    def bytes_per_offset(
        self, begin: Positions, end: Positions, groups: dict[tuple[str, int], str | None]
    ) -> dict[tuple[str, int], float]:
        """For each queue with more than one offset to read, about how many bytes of records
        an offset holds (from its first records)."""
        options = self.options
        found: dict[tuple[str, int], float] = {}
        for key, stop in end.items():
            start = begin.get(key, stop)
            if stop - start <= 1:
                continue
            queue_range = QueueRange(key[0], key[1], start, stop, groups.get(key))
            size = bytes_per_offset(self.client, queue_range, options.tags, options.sql)
            if size is not None:
                found[key] = size
        return found

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The messages of one partition's queue ranges, as Arrow record batches (on an
        executor)."""
        ranges = partition.value
        if not isinstance(ranges, tuple):
            return
        with SpoolmqClient(self.options.connection) as client:
            for queue_range in ranges:
                yield from fetch_range(
                    client,
                    queue_range,
                    self.options.tags,
                    self.options.fail_on_data_loss,
                    sql=self.options.sql,
                    max_bytes=self.options.fetch_max_bytes,
                )

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class SpoolmqStreamReader(_Reads, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("spoolmq")``: offsets ``{"topic": {"queue": next}}``."""

    def __init__(self, options: SourceOptions) -> None:
        super().__init__(options)
        self._latest: Positions = {}
        self._target: Positions | None = None
        self._held: set[tuple[str, int]] = set()
        self._committed: Positions = {}
        self._initial: Positions | None = None

    def __getstate__(self) -> dict[str, Any]:
        cleared: dict[str, Any] = {
            "_latest": {},
            "_target": None,
            "_held": set(),
            "_committed": {},
            "_initial": None,
        }
        return {**super().__getstate__(), **cleared}

    def initialOffset(self) -> dict[str, Any]:
        """A new query's start: ``startingOffsets`` / ``startingTimestamp`` (default latest).
        Spark asks only when the checkpoint has no offsets yet; remembered, so a loss at
        this start is blamed on ``startingOffsets`` rather than on a checkpoint."""
        self._initial = resolve(self.client, self.options.starting, self.discover())
        return to_json(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: read up to what the queues hold now, and no further."""
        self._target = {key: s.max_offset for key, s in self.discover().items()}

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The next micro-batch's end: every queue's max offset, within ``limit``. Where
        no queue holds anything past ``start`` it first waits up to ``headWaitMs`` for an
        arrival (the broker's long poll), as Spark asks again at once otherwise.

        ``start`` is processed by now (the previous micro-batch finished before this one is
        planned), so it is the consumer group's position too: committed here, the lag stays
        current while no new data makes Spark call ``commit``."""
        self._commit_group(from_json(start))
        states = self.discover()
        begin = with_new_queues(from_json(start), states)
        if self._target is None and at_head(begin, states):  # nothing new: wait for it
            options = self.options
            wait_for_arrival(self.client, begin, options.tags, options.sql, options.head_wait_ms)
            states = self.discover()
            begin = with_new_queues(from_json(start), states)
        latest = {key: self._reachable(key, offset, states) for key, offset in begin.items()}
        self._latest = {key: s.max_offset for key, s in states.items()}
        if isinstance(limit, ReadMaxRows):
            return to_json(cap(begin, latest, limit.max_rows))
        return to_json(latest)

    def _reachable(self, key: tuple[str, int], position: int, states: QueueStates) -> int:
        """How far ``key`` may be read from ``position`` in this micro-batch."""
        state = states.get(key)
        if state is None:  # its topic is gone from the subscription (deleted, unmatched)
            return position
        latest = state.max_offset
        if self._target is not None:
            latest = min(latest, self._target.get(key, position))
        if latest < position:
            if key not in self._held:
                LOG.warning(
                    "%s/%d: max offset %d is below the query's position %d (a replica "
                    "behind, or a failover dropped unacknowledged messages); holding %d",
                    *key, latest, position, position,
                )  # fmt: skip
                self._held.add(key)
            return position
        self._held.discard(key)
        return latest

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The queues' max offsets at the last trigger (``latestOffset`` in query progress)."""
        return to_json(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = from_json(start), from_json(end)
        if begin == stop:
            return []
        return self.plan(begin, stop, self.discover(), self._loss_case(begin))

    def _loss_case(self, begin: Positions) -> LossCase:
        """Where ``begin`` came from: this query's ``startingOffsets``, or its checkpoint."""
        return LossCase.STARTING_OFFSETS if begin == self._initial else LossCase.CHECKPOINT

    def commit(self, end: dict[str, Any]) -> None:
        """Everything up to ``end`` is processed: store it as ``consumerGroup``'s offsets,
        so lag reports and admin pages show the query like any consumer."""
        self._commit_group(from_json(end))

    def _commit_group(self, processed: Positions) -> None:
        group = self.options.consumer_group
        if self._latest:  # leave out queues gone since (a deleted topic): they would fail all
            processed = {key: o for key, o in processed.items() if key in self._latest}
        if group is None or not processed or processed == self._committed:
            return
        offsets = [(t, q, o) for (t, q), o in sorted(processed.items())]
        try:
            self.client.commit_offsets(group, offsets)
        except SpoolmqError as exc:  # the next commit carries it again
            LOG.warning("could not commit the offsets of group %s: %s", group, exc)
            return
        self._committed = dict(processed)

    def stop(self) -> None:
        self.close()


class SpoolmqBatchReader(_Reads, DataSourceReader):
    """``spark.read.format("spoolmq")``: [startingOffsets, endingOffsets) of every queue,
    by default earliest to latest."""

    def partitions(self) -> Sequence[InputPartition]:
        states = self.discover()
        begin = resolve(self.client, self.options.starting, states)
        end = resolve(self.client, self.options.ending, states)
        try:
            plan = self.plan(begin, end, states, LossCase.STARTING_OFFSETS)
            return plan or [InputPartition(None)]
        finally:
            self.close()

"""Recovery on open (reference §5, Pitfall 6), in RocketMQ's order:

1. recover the ConsumeQueues (last three files, up to the first invalid unit);
2. scan the CommitLog — normal exit: the last three files; abnormal exit (``abort`` was
   left behind): from the newest file older than the checkpoint, dispatching every record
   the ConsumeQueues lack — and cut it at the first invalid record;
3. cut the ConsumeQueues to the CommitLog's valid end;
4. reput from the ConsumeQueues' max physical offset until caught up;
5. rebuild the CommitLog's next-queue-offset table from the ConsumeQueues.

Only then may the store accept writes.
"""

from __future__ import annotations

import mmap

from storage.checkpoint import StoreCheckpoint
from storage.commit_log import CommitLog
from storage.consume_queue import ConsumeQueue
from storage.consume_queue_table import ConsumeQueueTable
from storage.dispatcher import Dispatcher


class StoreRecovery:
    """One recovery of a freshly loaded store; ``findings`` says what was cut and why."""

    def __init__(
        self,
        commit_log: CommitLog,
        table: ConsumeQueueTable,
        dispatcher: Dispatcher,
        checkpoint: StoreCheckpoint,
        check_crc: bool,
    ) -> None:
        self.commit_log = commit_log
        self.table = table
        self.dispatcher = dispatcher
        self.checkpoint = checkpoint
        self.check_crc = check_crc
        self.findings: list[str] = []
        self._queue_cache: dict[tuple[bytes, int], ConsumeQueue | None] = {}

    def run(self, last_exit_ok: bool) -> list[str]:
        """Recover, reput and rebuild the queue-offset table; the findings."""
        self._recover(last_exit_ok)
        self.dispatcher.reput_from(self.table.max_physic_offset, notify=False)
        self._recover_topic_queue_table()
        return self.findings

    def _recover(self, last_exit_ok: bool) -> None:
        max_cq_physical = -1
        for queue in self.table:
            queue.recover()
            max_cq_physical = max(max_cq_physical, queue.max_physic_offset)
        if last_exit_ok:
            end, findings = self.commit_log.recover_normally(self.check_crc)
        else:
            end, findings = self.commit_log.recover_abnormally(
                self.checkpoint.min_timestamp, self.check_crc, self._dispatch_recovered
            )
        self.findings = findings
        if not self.commit_log.queue.files:
            for queue in self.table:
                queue.destroy()
        elif max_cq_physical >= end:
            for queue in self.table:
                queue.truncate_dirty(end)

    def _dispatch_recovered(
        self,
        physical_offset: int,
        size: int,
        topic: bytes,
        queue_id: int,
        buffer: mmap.mmap | bytes,
    ) -> None:
        """Dispatch a record found by abnormal recovery unless its queue already has it.

        Most records are already indexed; checking the queue first avoids decoding them.
        """
        dispatcher = self.dispatcher
        if queue_id < 0:
            request = dispatcher.request_from_record(physical_offset, bytes(buffer))
            dispatcher.dispatch(request, notify=False)
            return
        key = (topic, queue_id)
        cache = self._queue_cache
        if key in cache:
            queue = cache[key]
        else:
            queue = cache[key] = self.table.find(topic.decode(), queue_id)
        if queue is not None and physical_offset + size <= queue.max_physic_offset:
            return
        position = physical_offset % self.commit_log.file_size
        record = buffer[position : position + size]
        request = dispatcher.request_from_record(physical_offset, record)
        dispatcher.dispatch(request, notify=False)
        if queue is None:
            cache[key] = self.table.find(request.topic, request.queue_id)

    def _recover_topic_queue_table(self) -> None:
        self.table.correct_min_offsets(self.commit_log.min_offset)
        self.commit_log.rebuild_topic_queue_table(self.table.next_offsets())

"""The CommitLog as replication sees it (RocketMQ's HA): a master reads it in chunks for its
slaves; a slave appends the chunks byte for byte and dispatches the complete records itself,
and cuts a record that never arrived whole before it writes on its own or follows another
master.
"""

from __future__ import annotations

from typing import Final

from storage.checkpoint import StoreCheckpoint
from storage.commit_log import CommitLog, ReplicaAppendError
from storage.dispatcher import Dispatcher
from storage.record.decode import RecordKind

REPLICATION_CHUNK_BYTES: Final = 32 * 1024
"""RocketMQ's haTransferBatchSize: the most CommitLog bytes one replication batch carries."""


class ReplicationLog:
    """Reads and appends of one store's CommitLog on behalf of replication."""

    def __init__(
        self, commit_log: CommitLog, dispatcher: Dispatcher, checkpoint: StoreCheckpoint
    ) -> None:
        self.commit_log = commit_log
        self.dispatcher = dispatcher
        self.checkpoint = checkpoint

    @property
    def last_store_timestamp(self) -> int:
        """Store time of the newest record in the CommitLog (how far a slave is behind in
        time); 0 when unknown."""
        last = self.commit_log.queue.last_file()
        if last is not None and last.store_timestamp:
            return last.store_timestamp
        return self.checkpoint.physic_msg_timestamp

    # ------------------------------------------------------------------ master side

    def start_for(self, slave_offset: int) -> int:
        """Where to stream from for a slave that reports ``slave_offset``.

        A slave at 0 starts at the beginning of this log's last file (RocketMQ), not at 0.
        """
        if slave_offset:
            return slave_offset
        max_offset = self.commit_log.max_offset
        return max_offset - max_offset % self.commit_log.file_size

    def read_chunk(self, offset: int, max_bytes: int = REPLICATION_CHUNK_BYTES) -> bytes:
        """Written CommitLog bytes from ``offset`` to the end of its file's data, capped.

        Empty at the log's end. An offset below the oldest file (deleted by retention) or
        past the end is refused: a slave there cannot continue from this log.
        """
        commit_log = self.commit_log
        if offset == commit_log.max_offset:
            return b""
        mapped = commit_log.queue.find_by_offset(offset)
        if mapped is None or offset > commit_log.max_offset:
            raise ReplicaAppendError(
                f"offset {offset} is outside this CommitLog "
                f"[{max(0, commit_log.min_offset)}, {commit_log.max_offset}]"
            )
        position = offset - mapped.file_from_offset
        size = min(max_bytes, mapped.read_position - position)
        return mapped.read(position, size) or b""

    # ------------------------------------------------------------------ slave side

    def append(self, offset: int, data: bytes) -> int:
        """Append CommitLog bytes from a master (byte for byte); the new max offset.

        The complete records among them are dispatched to the ConsumeQueues and the index
        at once, waking long-polls; a partial record at the tail waits for the next chunk.
        """
        end = self.commit_log.append_raw(offset, data)
        self._dispatch_complete_records()
        return end

    def _dispatch_complete_records(self) -> None:
        dispatcher = self.dispatcher
        table = self.commit_log.topic_queue_table
        last_timestamp = 0
        for scanned in self.commit_log.scan(self._undispatched_from()):
            if scanned.check.kind is not RecordKind.MESSAGE:
                break  # the tail of a record still on its way
            request = dispatcher.request_from_record(scanned.offset, scanned.data)
            if not dispatcher.dispatch(request, notify=True):
                break
            if request.is_dispatchable:
                table[(request.topic, request.queue_id)] = request.queue_offset + 1
            dispatcher.reput_from_offset = request.end_offset
            last_timestamp = request.store_timestamp
        last = self.commit_log.queue.last_file()
        if last_timestamp and last is not None:
            last.store_timestamp = last_timestamp

    def cut_partial_tail(self) -> int:
        """Cut a replicated record that never arrived whole; the CommitLog's new end.

        A slave's last chunk may end inside a record (the rest was on its way when the master
        went). Before this log takes writes of its own (a promotion) or bytes from another
        master (a new leader), that tail goes, so the next record starts where the last
        complete one ends.
        """
        end = self.commit_log.end_of_complete_records(self._undispatched_from())
        if end < self.commit_log.max_offset:
            self.commit_log.cut(end)
        return self.commit_log.max_offset

    def _undispatched_from(self) -> int:
        return max(self.dispatcher.reput_from_offset, self.commit_log.min_offset)

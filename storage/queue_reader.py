"""Reading one ConsumeQueue by queue offset, with RocketMQ's GetMessageStatus rules
(reference §10.3).

The offset alone decides most statuses (empty queue, too small, overflow); otherwise the
units from the offset to the end of their ConsumeQueue file go to the CommitLog's read loop,
capped like RocketMQ's ``isTheBatchFull``. ``next_begin_offset`` counts every unit examined,
filtered-out ones included.
"""

from __future__ import annotations

from storage.commit_log import CommitLog, UnitsRead
from storage.consume_queue import ConsumeQueue
from storage.record.message import GetMessageStatus
from storage.store_types import GetMessageResult, StoreConfig, TransferLimits


class QueueReader:
    """Reads ConsumeQueues of one store through its CommitLog, within its pull caps."""

    def __init__(self, commit_log: CommitLog, config: StoreConfig, memory_limit: int) -> None:
        self.commit_log = commit_log
        self.config = config
        # Units further than this behind the CommitLog's end count as "in disk": RocketMQ's
        # accessMessageInMemoryMaxRatio share of physical RAM.
        self.memory_limit = memory_limit

    def read(
        self,
        queue: ConsumeQueue,
        offset: int,
        max_messages: int,
        max_bytes: int | None,
        codes: frozenset[int] | None,
    ) -> GetMessageResult:
        """Up to ``max_messages`` of ``queue`` from ``offset`` whose tags code is in
        ``codes`` (None: every message)."""
        min_offset, max_offset = queue.min_offset, queue.max_offset
        status, next_offset = position_status(offset, min_offset, max_offset)
        if status is not None:
            return GetMessageResult(status, next_offset, min_offset, max_offset)
        max_messages = max(1, max_messages)
        found = queue.get_units(offset, max(16_000, max_messages * 20))
        if found is None:
            next_file = queue.roll_next_file(offset)
            return GetMessageResult(
                GetMessageStatus.OFFSET_FOUND_NULL, next_file, min_offset, max_offset
            )
        limits = self.transfer_limits(max_messages, max_bytes)
        read = self.commit_log.read_units(found[0], limits, codes)
        return GetMessageResult(
            _read_status(read), offset + read.scanned, min_offset, max_offset, read.messages
        )

    def transfer_limits(self, max_messages: int, max_bytes: int | None) -> TransferLimits:
        """The caps of one pull: the caller's, within the store's in-memory and in-disk
        ones."""
        config = self.config
        memory_bytes = config.max_transfer_bytes_in_memory
        if max_bytes is not None:
            memory_bytes = min(memory_bytes, max_bytes)
        return TransferLimits(
            max_messages,
            memory_bytes,
            config.max_transfer_count_in_memory,
            min(memory_bytes, config.max_transfer_bytes_in_disk),
            config.max_transfer_count_in_disk,
            self.commit_log.max_offset - self.memory_limit,
        )


def position_status(
    offset: int, min_offset: int, max_offset: int
) -> tuple[GetMessageStatus | None, int]:
    """The status decided by the offset alone, and the next offset; None to read units."""
    if max_offset == 0:
        return GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
    if offset < min_offset:
        return GetMessageStatus.OFFSET_TOO_SMALL, min_offset
    if offset == max_offset:
        return GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
    if offset > max_offset:
        return GetMessageStatus.OFFSET_OVERFLOW_BADLY, min_offset if min_offset == 0 else max_offset
    return None, offset


def _read_status(read: UnitsRead) -> GetMessageStatus:
    if read.messages:
        return GetMessageStatus.FOUND
    if read.removed:  # a removed message before any found one
        return GetMessageStatus.MESSAGE_WAS_REMOVING
    return GetMessageStatus.NO_MATCHED_MESSAGE

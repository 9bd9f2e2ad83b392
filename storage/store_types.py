"""The store's value types: its configuration, what a pull returns, and the dispatch request
that carries one record from the CommitLog to its ConsumeQueue. (The message values every
layer shares, put results and statuses among them, are in :mod:`storage.record.message`.)

Plain data shared by the facade, the dispatcher, the pull read loop and the services
layer; no behaviour beyond small derived properties.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from storage.delay_levels import DEFAULT_DELAY_LEVELS
from storage.record.layout import is_dispatchable
from storage.record.message import GetMessageStatus, MessageView, StoredMessage
from storage.retention import RetentionConfig
from storage.timer.config import TimerConfig


class FlushDiskType(Enum):
    ASYNC_FLUSH = "async"
    SYNC_FLUSH = "sync"


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Every size and limit of the store; defaults are RocketMQ's."""

    commit_log_file_size: int = 1024 * 1024 * 1024
    consume_queue_units_per_file: int = 300_000
    max_message_size: int = 4 * 1024 * 1024
    max_queues_per_topic: int = 1024
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    flush_disk_type: FlushDiskType = FlushDiskType.ASYNC_FLUSH
    check_crc_on_recover: bool = True
    # Pull caps (reference §10.3): a unit is "in disk" when it lies further than
    # access_message_in_memory_max_ratio % of physical RAM behind the CommitLog's end.
    max_transfer_bytes_in_memory: int = 256 * 1024
    max_transfer_count_in_memory: int = 32
    max_transfer_bytes_in_disk: int = 64 * 1024
    max_transfer_count_in_disk: int = 8
    access_message_in_memory_max_ratio: int = 40
    message_delay_levels: str = DEFAULT_DELAY_LEVELS
    sync_flush_timeout_ms: int = 5000
    flush_interval_commit_log_ms: int = 500
    flush_commit_log_least_pages: int = 4
    flush_commit_log_thorough_interval_ms: int = 10_000
    flush_interval_consume_queue_ms: int = 1000
    flush_consume_queue_least_pages: int = 2
    flush_consume_queue_thorough_interval_ms: int = 60_000
    clean_resource_interval_ms: int = 10_000
    clean_first_delay_ms: int = 60_000
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    message_index_enable: bool = True
    # RocketMQ's defaults are 5,000,000 slots and 20,000,000 entries (a 420 MB file); the
    # layout is the same, the default file is a tenth of that.
    max_hash_slot_num: int = 500_000
    max_index_num: int = 2_000_000
    # After an unclean exit the index is rebuilt from the CommitLog. True: before open()
    # returns; False: the owner calls catch_up_index() in chunks while serving.
    index_catch_up_on_open: bool = True
    timer: TimerConfig = field(default_factory=TimerConfig)


@dataclass(frozen=True, slots=True)
class GetMessageResult:
    """What one pull found, and where the next pull should start."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    views: list[MessageView] = field(default_factory=list)  # a read for views


@dataclass(slots=True)  # not frozen: cheaper to build, once per put (see StoredMessage)
class DispatchRequest:
    """What the ConsumeQueue, the index and arrival listeners need of one record."""

    topic: str
    queue_id: int
    physical_offset: int
    size: int
    tags_code: int
    store_timestamp: int
    queue_offset: int
    keys: str | None
    uniq_key: str | None
    sys_flag: int
    idempotency_hash: int | None = None  # a keyed send's index hash (idempotency_key_hash)

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.size

    @property
    def is_dispatchable(self) -> bool:
        return is_dispatchable(self.sys_flag)


ArrivalListener = Callable[[str, int, int, int], None]
"""Called after dispatch with (topic, queue id, new max offset, tags code)."""

FlushListener = Callable[[int], None]
"""Called on the flushing thread with the new flushed CommitLog offset."""

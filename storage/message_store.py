"""MessageStore: the facade over CommitLog, ConsumeQueues and the checkpoint.

Open a store with ``MessageStore.open(root, config)``: it takes the directory lock, loads
every file, recovers, re-dispatches what the ConsumeQueues miss, and only then accepts
writes. ``put_message``/``put_messages`` append and dispatch; ``get_message`` reads by queue
offset with RocketMQ's GetMessageStatus rules; ``close`` flushes and marks a clean exit.

The work lives in the parts it composes: ``commit_log`` (appends, reads, the pull read
loop), ``consume_queue_table`` (every ConsumeQueue, deleted topics), ``dispatcher``
(CommitLog → ConsumeQueue and index), ``recovery``, ``queue_reader`` (GetMessageStatus
rules and batch caps), ``store_flush`` (what a flush writes, and the flush threads of
``flush_service``), ``retention``, ``replication_log`` (the CommitLog as replication reads
and appends it), ``index_service`` (queries by key), ``store_check`` (``check()``).

The store is synchronous and has one writer: the owner calls put/get/flush from one thread
(the event loop); only ``flush_*`` may run on another thread at the same time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from storage.allocate_service import AllocateMappedFileService
from storage.checkpoint import StoreCheckpoint
from storage.commit_log import CommitLog
from storage.consume_queue import ConsumeQueue
from storage.consume_queue_table import ConsumeQueueTable
from storage.delay_levels import parse_delay_levels, redirect_delayed
from storage.disk_watch import DiskWatch
from storage.dispatcher import Dispatcher
from storage.errors import (
    QueueIdOutOfRangeError,
    StoreClosedError,
    StoreDiskFullError,
    StoreFlushFailedError,
    StoreNotWriteableError,
)
from storage.flush_service import DiskWatchService
from storage.index_service import IndexService, load_index
from storage.keyed_records import KeyedRecords
from storage.queue_reader import PropertyTest, QueueReader, RecordRange
from storage.record.encode import EncodedBatch, EncodedMessage, check_batch
from storage.record.message import Appended, Message, StoredMessage
from storage.record.msg_id import msg_id_prefix
from storage.record.properties import PROPERTY_DELAY
from storage.record.uniform_batch import UniformBatch, uniform_batch
from storage.recovery import StoreRecovery
from storage.replication_log import REPLICATION_CHUNK_BYTES, ReplicationLog
from storage.retention import StoreCleaner
from storage.running_flags import Refusal, RunningFlags
from storage.store_check import check_store
from storage.store_flush import StoreFlush
from storage.store_lock import acquire_store_lock, release_store_lock
from storage.store_types import (
    ArrivalListener,
    FlushDiskType,
    FlushListener,
    GetMessageResult,
    StoreConfig,
)
from storage.tag_filter import TagFilter
from storage.timer.transform import TIMER_TOPIC, is_timer_request, redirect_timer, timer_tags_code


class MessageStore:
    """The store of one directory. Use :meth:`open`."""

    dispatcher: Dispatcher
    """Created once the checkpoint and index are loaded (in :meth:`open`)."""
    keyed: KeyedRecords
    """Records sent with an idempotency key (created with the dispatcher)."""
    replication: ReplicationLog
    """The CommitLog as replication reads and appends it (created with the dispatcher)."""
    flusher: StoreFlush
    """Flushes the files and runs the flush and clean threads (created with the dispatcher)."""

    def __init__(self, root: Path, config: StoreConfig) -> None:
        self.root = root
        self.config = config
        self.delay_levels = parse_delay_levels(config.message_delay_levels)
        # Makes the next CommitLog file ahead of a roll, off the owner thread.
        self.allocate_service = AllocateMappedFileService(root / "prepared")
        self.commit_log = CommitLog(
            root / "commitlog", config.commit_log_file_size, config.store_host
        )
        self.commit_log.queue.allocator = self.allocate_service
        self.consume_queue_table = ConsumeQueueTable(
            root / "consumequeue",
            config.consume_queue_units_per_file,
            root / "config" / "deletedTopics.json",
        )
        self.flags = RunningFlags()
        self.checkpoint: StoreCheckpoint | None = None
        self.index_service: IndexService | None = None
        self.arrival_listeners: list[ArrivalListener] = []
        self.flush_listeners: list[FlushListener] = []
        self.recovery_findings: list[str] = []
        self.last_exit_ok = True
        # Every file system the store writes to (they may be different disks).
        self.disk_watch = DiskWatch(
            (root / "commitlog", root / "consumequeue", root / "index"),
            self.flags,
            config.retention.disk_space_warning_level_ratio,
        )
        self.cleaner = StoreCleaner(
            config.retention,
            self.disk_watch,
            self.commit_log.queue.delete_expired_by_time,
            self.after_commit_log_deleted,
        )
        self._lock_fd: int | None = None
        self._closed = True
        self._reader = QueueReader(self.commit_log, config)
        # Every msgId of this store is this prefix (store address and port) + 16 hex digits.
        self._msg_id_prefix = msg_id_prefix(*config.store_host)

    # ================================================================== lifecycle

    @classmethod
    def open(cls, root: Path | str, config: StoreConfig | None = None) -> MessageStore:
        """Lock, load, recover and start the store at ``root`` (created if missing)."""
        store = cls(Path(root), config or StoreConfig())
        store._start()
        return store

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = acquire_store_lock(self.root)
        try:
            self.last_exit_ok = not self.abort_path.exists()
            self.commit_log.load()
            self.consume_queue_table.load()
            self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
            self.index_service = load_index(
                self.root / "index", self.config, self.checkpoint, self.last_exit_ok
            )
            self.dispatcher = Dispatcher(
                self.commit_log,
                self.consume_queue_table,
                self.flags,
                self.delay_levels,
                self.arrival_listeners,
                self.checkpoint,
                self.index_service,
                sync_flush=self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH,
            )
            self.keyed = KeyedRecords(self.commit_log, self.dispatcher, self.index_service)
            self.replication = ReplicationLog(self.commit_log, self.dispatcher, self.checkpoint)
            self.flusher = StoreFlush(
                self.config,
                self.commit_log,
                self.consume_queue_table,
                self.checkpoint,
                self.index_service,
                self.flush_listeners,
                self.flags,
            )
            self.recovery_findings = StoreRecovery(
                self.commit_log,
                self.consume_queue_table,
                self.dispatcher,
                self.checkpoint,
                self.config.check_crc_on_recover,
            ).run(self.last_exit_ok)
            self.dispatcher.start_index_catch_up()
            if self.config.index_catch_up_on_open:
                self.dispatcher.catch_up_index()
            self.abort_path.touch()
            self._closed = False
        except BaseException:
            self._release_files()
            raise

    def start_services(self) -> None:
        """Start the flushers (or group commit in SYNC_FLUSH), the cleaner and the disk
        watch threads."""
        config = self.config
        watch = DiskWatchService(
            self.disk_watch.check,
            self.cleaner.forcibly,
            self.clean_once,
            config.retention.disk_check_interval_ms / 1000,
            config.clean_resource_interval_ms / 1000,
        )
        self.flusher.start_services(self.clean_once, watch)

    def stop_services(self) -> None:
        """Stop every background thread; each does its final flush."""
        if not self._closed:
            self.flusher.stop_services()

    @property
    def abort_path(self) -> Path:
        return self.root / "abort"

    def close(self) -> None:
        """Flush everything; remove ``abort`` only when nothing is left to dispatch."""
        if self._closed:
            return
        self.stop_services()
        self._closed = True
        if not self.flags.flush_failed:  # else what is on disk is all a restart may trust
            self.dispatcher.dispatch_pending(self.commit_log.max_offset)
            self.flusher.flush_all()
        clean = self.flags.writeable and self.dispatcher.dispatch_behind_bytes == 0
        self._release_files()
        if clean and self.flags.writeable:
            self.abort_path.unlink(missing_ok=True)

    def _release_files(self) -> None:
        if self.index_service is not None:
            self.index_service.close()
        self.commit_log.close()
        self.consume_queue_table.close()
        if self.checkpoint is not None:
            try:
                self.checkpoint.close(flush=not self.flags.flush_failed)
            except OSError as exc:  # the lock is released all the same; abort stays
                self.flags.refuse(Refusal.FLUSH_FAILED, f"checkpoint flush failed: {exc}")
        self.allocate_service.shutdown()
        if self._lock_fd is not None:
            release_store_lock(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ================================================================== put

    def put(self, messages: Sequence[Message]) -> Appended:
        """Append one message, or a batch of one topic and queue atomically with consecutive
        queue offsets, and (in ASYNC_FLUSH) dispatch it. The encoder fits the messages: a
        uniform batch (bodies and UNIQ_KEYs alone) column by column, anything else record by
        record with the general rules (delays, timers, tags, keys)."""
        self._check_writeable()
        if len(messages) == 1:
            return self._put_one(messages[0])
        now = time.time_ns() // 1_000_000
        if not messages:
            return Appended(self._msg_id_prefix, "", 0, 0, [], [], now)
        now = time.time_ns() // 1_000_000
        store_v6, max_size = self.commit_log.store_v6, self.config.max_message_size
        batch: EncodedBatch | UniformBatch | None = uniform_batch(messages, store_v6, max_size)
        if batch is not None and batch.topic != TIMER_TOPIC:
            self._check_queue_id(batch.queue_id)
        else:
            listed = list(messages)
            if any(map(is_timer_request, [m.properties for m in listed])):
                # A timed batch is timed as a whole: every message waits in the timer topic.
                timer = self.config.timer
                listed = [redirect_timer(m, now, timer, force=True) for m in listed]
            check_batch(listed)
            self._check_queue_id(listed[0].queue_id)
            batch = EncodedBatch(listed, store_v6, max_size)
            if batch.topic == TIMER_TOPIC:
                batch.tags_codes = [timer_tags_code(m.properties) for m in listed]
        try:
            appended = self.commit_log.append_encoded_batch(batch, now)
        except StoreNotWriteableError as exc:
            self.flags.mark_not_writeable(str(exc))
            raise self._refusal() from exc
        self.dispatcher.dispatch_appended_batch(appended)
        return appended.appended(self._msg_id_prefix)

    def _put_one(self, message: Message) -> Appended:
        now = time.time_ns() // 1_000_000
        if is_timer_request(message.properties):
            message = redirect_timer(message, now, self.config.timer)
        if PROPERTY_DELAY in message.properties:
            message = redirect_delayed(message, self.delay_levels)
        self._check_queue_id(message.queue_id)
        encoded = EncodedMessage(message, self.commit_log.store_v6, self.config.max_message_size)
        try:
            result = self.commit_log.append(encoded, message.store_timestamp or now)
        except StoreNotWriteableError as exc:
            self.flags.mark_not_writeable(str(exc))
            raise self._refusal() from exc
        self.dispatcher.dispatch_appended(encoded, result)
        return Appended(
            self._msg_id_prefix,
            encoded.topic,
            encoded.queue_id,
            result.queue_offset,
            [result.physical_offset],
            [result.size],
            result.store_timestamp,
        )

    def _check_queue_id(self, queue_id: int) -> None:
        if not 0 <= queue_id < self.config.max_queues_per_topic:
            raise QueueIdOutOfRangeError(
                f"queue id {queue_id} is out of range: 0 to {self.config.max_queues_per_topic - 1}"
            )

    def _check_writeable(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")
        if self.dispatcher.needs_reput:
            self.retry_dispatch()
        if not self.flags.writeable:
            raise self._refusal()

    def _refusal(self) -> StoreNotWriteableError:
        """The error for a refused write: its class names the most lasting cause."""
        flags = self.flags
        detail = f"store is not writeable: {flags.not_writeable_reason}"
        first = flags.first_refusal
        if first is Refusal.FLUSH_FAILED:
            return StoreFlushFailedError(detail)
        if first is Refusal.DISK_FULL or (
            first is Refusal.DISPATCH and self.dispatcher.failed_for_space
        ):
            return StoreDiskFullError(detail)
        return StoreNotWriteableError(detail)

    def retry_dispatch(self) -> bool:
        """After a dispatch failure, dispatch again from where it stopped (owner thread);
        True once dispatch has caught up (writes are accepted again unless another cause
        stands). A no-op while the disk is still full."""
        if self._closed or not self.dispatcher.needs_reput:
            return True
        if self.flags.disk_full:
            return False
        limit = self.commit_log.flushed_where if self.dispatcher.sync_flush else None
        return self.dispatcher.reput_if_needed(limit)

    @property
    def dispatch_stalled(self) -> bool:
        """A dispatch failure left records undispatched (:meth:`retry_dispatch`)."""
        return self.dispatcher.needs_reput

    @property
    def flush_failed(self) -> bool:
        """An fsync failed: nothing more may be acknowledged until a restart."""
        return self.flags.flush_failed

    @property
    def writeable(self) -> bool:
        return self.flags.writeable

    @property
    def not_writeable_reason(self) -> str:
        return self.flags.not_writeable_reason

    def mark_not_writeable(self, reason: str) -> None:
        self.flags.mark_not_writeable(reason)

    def mark_writeable(self) -> None:
        """Accept writes again; records left undispatched by a failure are re-dispatched
        before the next put."""
        self.flags.mark_writeable()

    # ================================================================== replication

    def append_replicated(self, offset: int, data: bytes) -> int:
        """Append CommitLog bytes from a master and dispatch the complete records among
        them; the new max offset (:meth:`ReplicationLog.append`)."""
        if self._closed:
            raise StoreClosedError("the store is closed")
        return self.replication.append(offset, data)

    def cut_partial_tail(self) -> int:
        """Cut a replicated record that never arrived whole (before a promotion or a new
        master); the CommitLog's new end."""
        return self.replication.cut_partial_tail()

    def read_replication_chunk(
        self, offset: int, max_bytes: int = REPLICATION_CHUNK_BYTES
    ) -> bytes:
        """CommitLog bytes for a slave from ``offset`` (:meth:`ReplicationLog.read_chunk`)."""
        return self.replication.read_chunk(offset, max_bytes)

    def replication_start(self, slave_offset: int) -> int:
        """Where to stream from for a slave that reports ``slave_offset``."""
        return self.replication.start_for(slave_offset)

    @property
    def last_store_timestamp(self) -> int:
        """Store time of the newest record in the CommitLog; 0 when unknown."""
        return self.replication.last_store_timestamp

    # ================================================================== dispatch

    def dispatch_pending(self, up_to_offset: int) -> int:
        """Dispatch appended records that end at or below ``up_to_offset`` (SYNC_FLUSH)."""
        return self.dispatcher.dispatch_pending(up_to_offset)

    @property
    def dispatch_behind_bytes(self) -> int:
        return self.dispatcher.dispatch_behind_bytes

    @property
    def dispatched_offset(self) -> int:
        """Every record below this CommitLog offset is dispatched."""
        return self.dispatcher.reput_from_offset

    @property
    def index_behind_bytes(self) -> int:
        """How much dispatched CommitLog the index has not covered yet."""
        return self.dispatcher.index_behind_bytes

    def catch_up_index(self, max_records: int | None = None) -> bool:
        """Index dispatched records the index lacks (owner thread); True once caught up."""
        return self.dispatcher.catch_up_index(max_records)

    # ================================================================== consume queues

    def find_consume_queue(
        self, topic: str, queue_id: int, create: bool = False
    ) -> ConsumeQueue | None:
        if create:
            return self.consume_queue_table.find_or_create(topic, queue_id)
        return self.consume_queue_table.find(topic, queue_id)

    def topics(self) -> list[str]:
        return self.consume_queue_table.topics()

    def queue_ids(self, topic: str) -> list[int]:
        return self.consume_queue_table.queue_ids(topic)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.consume_queue_table.min_offset(topic, queue_id)

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.consume_queue_table.max_offset(topic, queue_id)

    def delete_topic(self, topic: str) -> bool:
        """Drop a topic's ConsumeQueues (its records stay in the CommitLog until expiry).

        A tombstone (the CommitLog end at deletion, in ``config/deletedTopics.json``) keeps
        recovery from dispatching the old records again; the topic may be used afresh.
        """
        if not self.consume_queue_table.delete_topic(topic, self.commit_log.max_offset):
            return False
        self.commit_log.forget_queue_offsets(topic)
        return True

    # ================================================================== get

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_messages: int = 32,
        max_bytes: int | None = None,
        tag_filter: TagFilter | None = None,
        views: bool = False,
        on_slave: bool = False,
        property_filter: PropertyTest | None = None,
    ) -> GetMessageResult:
        """Read up to ``max_messages`` from ``offset`` of one queue (reference §10.3; the first
        message always, even over the byte cap). ``views``: as views (what a consumer is shown
        of each), in ``views``; ``on_slave``: read by a slave (an offset wrong for the queue
        stays the next one: :func:`~storage.queue_reader.next_offset_correction`);
        ``property_filter``: a test of each record's properties after the tag filter (a SQL92
        filter's ``matches``), what fails it skipped and counted in the next offset. ``group``
        is RocketMQ's parity: reads do not depend on it."""
        del group
        queue = self._read_queue(topic, queue_id)
        codes = None if tag_filter is None else tag_filter.codes
        return self._reader.read(
            queue, offset, max_messages, max_bytes, codes, views, on_slave, property_filter
        )

    def read_records(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        max_bytes: int,
        tag_filter: TagFilter | None = None,
        property_filter: PropertyTest | None = None,
        *,
        end_offset: int | None = None,
        on_slave: bool = False,
    ) -> RecordRange:
        """The records of one queue from ``offset`` as the CommitLog stores them, up to
        ``max_bytes`` (the first always) and before ``end_offset`` (None: the queue's end):
        a scan's read, with :meth:`get_message`'s statuses and filters
        (:meth:`~storage.queue_reader.QueueReader.read_records`)."""
        queue = self._read_queue(topic, queue_id)
        codes = None if tag_filter is None else tag_filter.codes
        reader = self._reader
        return reader.read_records(
            queue, offset, max_bytes, codes, property_filter, end_offset, on_slave
        )

    def _read_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        """The queue a read asks for (None: no such queue); StoreClosedError once closed."""
        if self._closed:
            raise StoreClosedError("the store is closed")
        return self.consume_queue_table.find(topic, queue_id)

    # ================================================================== lookups

    def look_message_by_offset(self, physical_offset: int) -> StoredMessage | None:
        """The record at a physical offset, or None."""
        return self.commit_log.look_message(physical_offset)

    def look_message_by_id(self, msg_id: str) -> StoredMessage | None:
        """The record an offsetMsgId points at; None when malformed or gone."""
        return self.commit_log.look_message_by_id(msg_id)

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int | None = None
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY is ``key``, stored in [begin, end]
        (default: until a second from now); at most 64, oldest first."""
        if self.index_service is None:
            return []
        end = time.time_ns() // 1_000_000 + 1000 if end is None else end
        return self.index_service.query_messages(self.commit_log, topic, key, max_num, begin, end)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """RocketMQ's ``searchOffset``: the queue offset stored closest to ``timestamp_ms``
        (see :meth:`ConsumeQueue.offset_by_time`); 0 for an unknown queue."""
        queue = self.consume_queue_table.find(topic, queue_id)
        return 0 if queue is None else queue.offset_by_time(timestamp_ms, *self._store_times())

    def first_offset_at_or_after(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (RocketMQ 5's LOWER
        boundary: where a group starting "from this time" begins); 0 for an unknown queue."""
        queue = self.consume_queue_table.find(topic, queue_id)
        times = self._store_times()
        return 0 if queue is None else queue.first_offset_stored_at_or_after(timestamp_ms, *times)

    def store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset; -1 when there is none."""
        queue = self.consume_queue_table.find(topic, queue_id)
        return -1 if queue is None else queue.store_time_at(offset, *self._store_times())

    def _store_times(self) -> tuple[Callable[[int, int], int], int]:
        """What a ConsumeQueue search by time reads: records' store times, the CommitLog min."""
        return self.commit_log.store_time_of, self.commit_log.min_offset

    # ================================================================== flush

    def flush_commit_log(self, least_pages: int = 0) -> int:
        """Force CommitLog pages to disk (callable off the owner thread); the flushed offset.
        Flush listeners hear of every advance, on the flushing thread."""
        return self.flusher.flush_commit_log(least_pages)

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """Force ConsumeQueue pages; on a thorough flush also the index and the checkpoint."""
        self.flusher.flush_consume_queues(least_pages)

    def flush_all(self) -> None:
        self.flusher.flush_all()

    def wake_flush(self) -> None:
        """Ask the group commit (SYNC_FLUSH) to flush now; a no-op in ASYNC_FLUSH. Waiters
        learn of the flush through ``flush_listeners``."""
        self.flusher.wake()

    @property
    def flushed_offset(self) -> int:
        """The CommitLog offset up to which every byte is on disk."""
        return self.commit_log.flushed_where

    @property
    def min_physical_offset(self) -> int:
        """Where the CommitLog's oldest file starts (0 for an empty log)."""
        return max(0, self.commit_log.min_offset)

    @property
    def max_physical_offset(self) -> int:
        """The CommitLog's end: where the next record goes."""
        return self.commit_log.max_offset

    # ================================================================== retention, check

    def clean_once(self) -> int:
        """One pass of disk checks and file expiry (the clean service calls this)."""
        return self.cleaner.run_once()

    def after_commit_log_deleted(self) -> None:
        """Drop ConsumeQueue and index files below the new CommitLog min offset."""
        min_physical = self.commit_log.min_offset
        self.consume_queue_table.delete_expired(min_physical)
        if self.index_service is not None:
            self.index_service.delete_expired(min_physical)

    def check(self, fix: bool = False) -> list[str]:
        """Consistency report (recovery findings first); empty when healthy.

        With ``fix=True`` a queue with bad units is cut at its first bad unit.
        """
        problems = check_store(self.commit_log, self.consume_queue_table, self.checkpoint, fix)
        return self.recovery_findings + problems

"""MessageStore: the facade over CommitLog, ConsumeQueues and the checkpoint.

Open a store with ``MessageStore.open(root, config)``: it takes the directory lock, loads
every file, recovers, re-dispatches what the ConsumeQueues miss, and only then accepts
writes. ``put_message``/``put_messages`` append and dispatch; ``get_message`` reads by queue
offset with RocketMQ's GetMessageStatus rules; ``close`` flushes and marks a clean exit.

The store is synchronous and has one writer: the owner calls put/get/flush from one thread
(the event loop); only ``flush_*`` may run on another thread at the same time.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import mmap
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Final

from storage.allocate_service import AllocateMappedFileService
from storage.checkpoint import StoreCheckpoint
from storage.codec import (
    CQ_UNIT_STRUCT,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_REAL_QID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
    EncodedMessage,
    Message,
    RecordKind,
    StoredMessage,
    check_numbers,
    check_record,
    decode_msg_id,
    decode_record,
    encode_msg_id,
    tags_code,
    to_int32,
)
from storage.commit_log import AppendResult, CommitLog
from storage.consume_queue import ConsumeQueue
from storage.delay_levels import (
    DEFAULT_DELAY_LEVELS,
    SCHEDULE_TOPIC,
    delay_level_to_queue_id,
    deliver_timestamp,
    parse_delay_levels,
)
from storage.errors import (
    MessageRejectedError,
    QueueIdOutOfRangeError,
    StoreClosedError,
    StoreLockedError,
    StoreNotWriteableError,
)
from storage.flush_service import (
    CleanService,
    CommitLogFlusher,
    ConsumeQueueFlusher,
    GroupCommitService,
    ServiceThread,
)
from storage.index_service import IndexService
from storage.json_file import load_json, save_json
from storage.retention import DISK_FULL_REASON, RetentionConfig, StoreCleaner

PRE_BLANK_SIZE: Final = 0x7FFFFFFF


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
    max_transfer_bytes_in_memory: int = 256 * 1024
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


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"


@dataclass(slots=True)  # not frozen: ~1 µs less per put (see StoredMessage)
class PutResult:
    """One stored message: its id and where it went."""

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    store_timestamp: int
    status: PutStatus = PutStatus.PUT_OK

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.size


class GetMessageStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True, slots=True)
class GetMessageResult:
    """What one pull found, and where the next pull should start."""

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False

    @property
    def buffer_total_size(self) -> int:
        return sum(m.size for m in self.messages)


class TagFilter:
    """A tag subscription: ``*`` (everything) or ``A||B``, compared by Java hash code."""

    __slots__ = ("codes", "expression", "tags")

    def __init__(self, expression: str | None) -> None:
        self.expression = (expression or "*").strip() or "*"
        if self.expression == "*":
            self.tags: frozenset[str] | None = None
            self.codes: frozenset[int] | None = None
            return
        tags = frozenset(t.strip() for t in self.expression.split("||") if t.strip())
        self.tags = tags or None
        self.codes = frozenset(tags_code(t) for t in tags) if tags else None

    @property
    def matches_all(self) -> bool:
        return self.codes is None

    def matches_code(self, code: int) -> bool:
        return self.codes is None or to_int32(code) in self.codes

    def matches_tags(self, tags: str | None) -> bool:
        """The exact re-check that removes hash collisions."""
        return self.tags is None or (tags is not None and tags in self.tags)


@dataclass(slots=True)  # not frozen: ~1 µs less per put (see StoredMessage)
class DispatchRequest:
    """What the ConsumeQueue (and arrival listeners) need of one record."""

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

    @property
    def end_offset(self) -> int:
        return self.physical_offset + self.size

    @property
    def is_dispatchable(self) -> bool:
        kind = self.sys_flag & TRANSACTION_TYPE_MASK
        return kind in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)


ArrivalListener = Callable[[str, int, int, int], None]
"""Called after dispatch with (topic, queue id, new max offset, tags code)."""


class MessageStore:
    """The store of one directory. Use :meth:`open`."""

    def __init__(self, root: Path, config: StoreConfig) -> None:
        self.root = root
        self.config = config
        self.delay_levels = parse_delay_levels(config.message_delay_levels)
        self.commit_log = CommitLog(
            root / "commitlog", config.commit_log_file_size, config.store_host
        )
        self.allocate_service = AllocateMappedFileService(root / "prepared")
        self.commit_log.queue.allocator = self.allocate_service
        self.consume_queue_root = root / "consumequeue"
        self.consume_queues: dict[str, dict[int, ConsumeQueue]] = {}
        self.checkpoint: StoreCheckpoint | None = None
        self.index_service: IndexService | None = None
        # The index is complete up to this CommitLog offset; while it lags behind the
        # dispatched offset, dispatch leaves indexing to catch_up_index().
        self.index_reput_offset = 0
        self._index_caught_up = False
        self.arrival_listeners: list[ArrivalListener] = []
        self.reput_from_offset = 0
        self.recovery_findings: list[str] = []
        self.last_exit_ok = True
        self.writeable = True
        self.not_writeable_reason = ""
        self._pending_dispatch: deque[DispatchRequest] = deque()
        self.flush_listeners: list[Callable[[int], None]] = []
        self.cleaner = StoreCleaner(self, config.retention)
        self.group_commit: GroupCommitService | None = None
        self._services: list[ServiceThread] = []
        self._needs_reput = False
        self._recovery_queue_cache: dict[tuple[bytes, int], ConsumeQueue | None] = {}
        self._deleted_topics_path = root / "config" / "deletedTopics.json"
        self._deleted_topics: dict[str, int] = {}
        self._lock_fd: int | None = None
        self._closed = True
        self._memory_limit = _physical_memory() * config.access_message_in_memory_max_ratio // 100
        # Every msgId of this store is this prefix (store address and port) + 16 hex digits.
        self._msg_id_prefix = encode_msg_id(config.store_host[0], config.store_host[1], 0)[:-16]

    # ================================================================== lifecycle

    @classmethod
    def open(cls, root: Path | str, config: StoreConfig | None = None) -> MessageStore:
        """Lock, load, recover and start the store at ``root`` (created if missing)."""
        store = cls(Path(root), config or StoreConfig())
        store._start()
        return store

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            self.last_exit_ok = not self.abort_path.exists()
            self._deleted_topics = _load_tombstones(self._deleted_topics_path)
            self.commit_log.load()
            self._load_consume_queues()
            self.checkpoint = StoreCheckpoint(self.root / "checkpoint")
            if self.config.message_index_enable:
                self.index_service = IndexService(
                    self.root / "index",
                    self.config.max_hash_slot_num,
                    self.config.max_index_num,
                    self.checkpoint,
                )
                self.index_service.load(self.last_exit_ok)
            self._recover()
            self._reput()
            self._recover_topic_queue_table()
            self._start_index_catch_up()
            self.abort_path.touch()
            self._closed = False
        except BaseException:
            self._release_files()
            raise

    def start_services(self) -> None:
        """Start the flushers (or group commit in SYNC_FLUSH) and the cleaner threads."""
        if self._services:
            return
        config = self.config
        if config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self.group_commit = GroupCommitService(self)
            commit_log_service: ServiceThread = self.group_commit
        else:
            commit_log_service = CommitLogFlusher(
                self,
                config.flush_interval_commit_log_ms / 1000,
                config.flush_commit_log_least_pages,
                config.flush_commit_log_thorough_interval_ms / 1000,
            )
        self._services = [
            commit_log_service,
            ConsumeQueueFlusher(
                self,
                config.flush_interval_consume_queue_ms / 1000,
                config.flush_consume_queue_least_pages,
                config.flush_consume_queue_thorough_interval_ms / 1000,
            ),
            CleanService(
                self, config.clean_resource_interval_ms / 1000, config.clean_first_delay_ms / 1000
            ),
        ]
        for service in self._services:
            service.start()

    def stop_services(self) -> None:
        """Stop every background thread; each does its final flush."""
        services, self._services = self._services, []
        for service in services:
            service.stop()
        self.group_commit = None

    @property
    def abort_path(self) -> Path:
        return self.root / "abort"

    def _acquire_lock(self) -> None:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(
                f"store directory {self.root} is in use by another process (lock held on "
                f"{self.root / 'lock'})"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, b"lock")
        self._lock_fd = fd

    def close(self) -> None:
        """Flush everything; remove ``abort`` only when nothing is left to dispatch."""
        if self._closed:
            return
        self.stop_services()
        self._closed = True
        self.dispatch_pending(self.commit_log.max_offset)
        self.commit_log.queue.flush_all()
        for queue in self._all_consume_queues():
            queue.queue.flush_all()
        if self.checkpoint is not None:
            self.checkpoint.flush()
        clean = self.writeable and self.dispatch_behind_bytes == 0
        self._release_files()
        if clean:
            self.abort_path.unlink(missing_ok=True)

    def _release_files(self) -> None:
        if self.index_service is not None:
            self.index_service.close()
        self.commit_log.close()
        for queue in self._all_consume_queues():
            queue.close()
        if self.checkpoint is not None:
            self.checkpoint.close()
        self.allocate_service.shutdown()
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> MessageStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # ================================================================== recovery

    def _load_consume_queues(self) -> None:
        if not self.consume_queue_root.is_dir():
            return
        for topic_dir in sorted(self.consume_queue_root.iterdir()):
            if not topic_dir.is_dir():
                continue
            for queue_dir in sorted(topic_dir.iterdir()):
                if queue_dir.is_dir() and queue_dir.name.isdigit():
                    queue = self._new_consume_queue(topic_dir.name, int(queue_dir.name))
                    queue.load()

    def _recover(self) -> None:
        max_cq_physical = -1
        for queue in self._all_consume_queues():
            queue.recover()
            max_cq_physical = max(max_cq_physical, queue.max_physic_offset)
        check_crc = self.config.check_crc_on_recover
        if self.last_exit_ok:
            end, findings = self.commit_log.recover_normally(check_crc)
        else:
            assert self.checkpoint is not None
            end, findings = self.commit_log.recover_abnormally(
                self.checkpoint.min_timestamp, check_crc, self._dispatch_recovered
            )
        self.recovery_findings = findings
        if not self.commit_log.queue.files:
            for queue in self._all_consume_queues():
                queue.destroy()
        elif max_cq_physical >= end:
            for queue in self._all_consume_queues():
                queue.truncate_dirty(end)

    def _start_index_catch_up(self) -> None:
        index = self.index_service
        if index is None:
            return
        last = index.end_phy_offset
        start = max(last, self.commit_log.min_offset, 0)
        if last >= 0:
            record = self.commit_log.read_record(last)
            start = max(start, last + len(record)) if record is not None else start
        self.index_reput_offset = start
        self._index_caught_up = start >= self.reput_from_offset
        if self.config.index_catch_up_on_open:
            self.catch_up_index()

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
        if queue_id < 0:
            self._dispatch(self._request_from_record(physical_offset, bytes(buffer)), notify=False)
            return
        key = (topic, queue_id)
        cache = self._recovery_queue_cache
        if key in cache:
            queue = cache[key]
        else:
            queue = cache[key] = self.find_consume_queue(topic.decode(), queue_id)
        if queue is not None and physical_offset + size <= queue.max_physic_offset:
            return
        position = physical_offset % self.config.commit_log_file_size
        record = buffer[position : position + size]
        request = self._request_from_record(physical_offset, record)
        self._dispatch(request, notify=False)
        if queue is None:
            cache[key] = self.find_consume_queue(request.topic, request.queue_id)

    def _reput(self) -> None:
        """Dispatch every record the ConsumeQueues do not cover yet."""
        start = max([q.max_physic_offset for q in self._all_consume_queues()] + [0])
        self._reput_from(start, notify=False)

    def _reput_from(self, start: int, notify: bool = True) -> None:
        offset = max(start, self.commit_log.min_offset, 0)
        self._pending_dispatch.clear()
        for scanned in self.commit_log.scan(offset):
            if scanned.check.kind is not RecordKind.MESSAGE:
                break
            request = self._request_from_record(scanned.offset, scanned.data)
            if not self._dispatch(request, notify=notify):
                return
            offset = request.end_offset
        self.reput_from_offset = max(offset, self.commit_log.max_offset)

    def _recover_topic_queue_table(self) -> None:
        table: dict[tuple[str, int], int] = {}
        min_physical = self.commit_log.min_offset
        for queue in self._all_consume_queues():
            table[(queue.topic, queue.queue_id)] = queue.max_offset
            queue.correct_min_offset(min_physical)
        self.commit_log.rebuild_topic_queue_table(table)

    def _request_from_record(self, physical_offset: int, data: bytes) -> DispatchRequest:
        record = decode_record(data)
        properties = record.properties
        return self._make_request(
            record.topic,
            record.queue_id,
            physical_offset,
            record.size,
            properties,
            record.store_timestamp,
            record.queue_offset,
            record.sys_flag,
        )

    def _make_request(
        self,
        topic: str,
        queue_id: int,
        physical_offset: int,
        size: int,
        properties: dict[str, str],
        store_timestamp: int,
        queue_offset: int,
        sys_flag: int,
    ) -> DispatchRequest:
        return DispatchRequest(
            topic=topic,
            queue_id=queue_id,
            physical_offset=physical_offset,
            size=size,
            tags_code=self._tags_code_of(topic, properties, store_timestamp),
            store_timestamp=store_timestamp,
            queue_offset=queue_offset,
            keys=properties.get(PROPERTY_KEYS),
            uniq_key=properties.get(PROPERTY_UNIQ_KEY),
            sys_flag=sys_flag,
        )

    def _tags_code_of(self, topic: str, properties: dict[str, str], store_timestamp: int) -> int:
        """Tag hash, except in the schedule topic where it is the delivery time."""
        if topic == SCHEDULE_TOPIC:
            delay = properties.get(PROPERTY_DELAY)
            if delay is not None and delay.lstrip("-").isdigit():
                return deliver_timestamp(self.delay_levels, int(delay), store_timestamp)
        return tags_code(properties.get(PROPERTY_TAGS))

    # ================================================================== put

    def put_message(self, message: Message) -> PutResult:
        """Validate, append and (in ASYNC_FLUSH) dispatch one message."""
        self._check_writeable()
        encoded = self._encode(self._redirect_delayed(message))
        try:  # = self._append(encoded, _now_ms()), inlined on the hot path
            result = self.commit_log.append(encoded, time.time_ns() // 1_000_000)
        except StoreNotWriteableError as exc:
            self.mark_not_writeable(str(exc))
            raise
        return self._after_append(encoded, result)

    def _redirect_delayed(self, message: Message) -> Message:
        """A message with ``DELAY`` > 0 goes to the schedule topic, queue ``level - 1``,
        remembering its real topic and queue (reference §8). The level is clamped to the
        table; transaction halves are never delayed."""
        delay = message.properties.get(PROPERTY_DELAY)
        if delay is None or message.topic == SCHEDULE_TOPIC:
            return message
        kind = message.sys_flag & TRANSACTION_TYPE_MASK
        if kind not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return message
        try:
            level = int(delay)
        except ValueError:
            raise MessageRejectedError(f"DELAY must be a delay level, not {delay!r}") from None
        if level <= 0:
            return message
        level = min(level, len(self.delay_levels))
        properties = dict(message.properties)
        properties[PROPERTY_DELAY] = str(level)
        properties[PROPERTY_REAL_TOPIC] = message.topic
        properties[PROPERTY_REAL_QID] = str(message.queue_id)
        return dataclasses.replace(
            message,
            topic=SCHEDULE_TOPIC,
            queue_id=delay_level_to_queue_id(level),
            properties=properties,
        )

    def put_messages(self, messages: list[Message]) -> list[PutResult]:
        """Append a batch of one topic and queue atomically, with consecutive queue offsets."""
        self._check_writeable()
        if not messages:
            return []
        first = messages[0]
        try:
            delayed = any(int(m.properties.get(PROPERTY_DELAY, "0") or 0) > 0 for m in messages)
        except ValueError:
            raise MessageRejectedError("DELAY must be a delay level (an integer)") from None
        if delayed:
            raise MessageRejectedError(
                "a batch cannot be delayed; send delayed messages one by one"
            )
        # RocketMQ answers MESSAGE_ILLEGAL too (reference §2.9): a prepared message would
        # take a queue offset that is never dispatched, leaving a hole in the ConsumeQueue.
        if any(m.sys_flag & TRANSACTION_TYPE_MASK for m in messages):
            raise MessageRejectedError("a batch cannot hold transactional messages")
        if any(m.topic != first.topic or m.queue_id != first.queue_id for m in messages):
            raise MessageRejectedError(
                "every message of a batch must have the same topic and queue"
            )
        for message in messages:
            check_numbers(message)  # a batch is all or nothing: check before writing
        encoded = [self._encode(m) for m in messages]
        now = _now_ms()
        try:
            appended = self.commit_log.append_batch(encoded, now)
        except StoreNotWriteableError as exc:
            self.mark_not_writeable(str(exc))
            raise
        return [self._after_append(e, r) for e, r in zip(encoded, appended, strict=True)]

    def _encode(self, message: Message) -> EncodedMessage:
        if not 0 <= message.queue_id < self.config.max_queues_per_topic:
            raise QueueIdOutOfRangeError(
                f"queue id {message.queue_id} is out of range: 0 to "
                f"{self.config.max_queues_per_topic - 1}"
            )
        return EncodedMessage(message, self.commit_log.store_v6, self.config.max_message_size)

    def _append(self, encoded: EncodedMessage, now: int) -> AppendResult:
        try:
            return self.commit_log.append(encoded, now)
        except StoreNotWriteableError as exc:
            self.mark_not_writeable(str(exc))
            raise

    def _after_append(self, encoded: EncodedMessage, result: AppendResult) -> PutResult:
        topic = encoded.topic
        physical_offset = result.physical_offset
        store_timestamp = result.store_timestamp
        # The encoder already has the tags code, keys and uniq key of the properties.
        request = DispatchRequest(
            topic,
            encoded.queue_id,
            physical_offset,
            result.size,
            encoded.tags_code
            if topic != SCHEDULE_TOPIC
            else self._tags_code_of(topic, encoded.properties, store_timestamp),
            store_timestamp,
            result.queue_offset,
            encoded.keys,
            encoded.uniq_key,
            encoded.sys_flag,
        )
        if self.config.flush_disk_type is FlushDiskType.SYNC_FLUSH:
            self._pending_dispatch.append(request)
        elif not self._needs_reput and self._dispatch(request, notify=True):
            self.reput_from_offset = physical_offset + result.size
        return PutResult(
            self._msg_id_prefix + f"{physical_offset:016X}",  # = encode_msg_id(host, port, offset)
            topic,
            encoded.queue_id,
            result.queue_offset,
            physical_offset,
            result.size,
            store_timestamp,
        )

    def _check_writeable(self) -> None:
        if self._closed:
            raise StoreClosedError("the store is closed")
        if self._needs_reput:
            self.reput_if_needed()
        if not self.writeable:
            raise StoreNotWriteableError(f"store is not writeable: {self.not_writeable_reason}")

    def mark_not_writeable(self, reason: str) -> None:
        self.writeable = False
        self.not_writeable_reason = reason

    def mark_writeable(self) -> None:
        """Accept writes again; records left undispatched by a failure are re-dispatched."""
        self.writeable = True
        self.not_writeable_reason = ""

    def reput_if_needed(self) -> None:
        """After a dispatch failure: dispatch what the ConsumeQueues miss (owner thread)."""
        if self._needs_reput and self.writeable:
            self._needs_reput = False
            self._reput_from(self.reput_from_offset)

    # ================================================================== dispatch

    def _dispatch(self, request: DispatchRequest, notify: bool) -> bool:
        """Index one record; False (store marked not writeable) when a file cannot be made."""
        deleted = self._deleted_topics
        if deleted and request.physical_offset < deleted.get(request.topic, -1):
            return True  # a record of a topic deleted since: never dispatched again
        dispatchable = request.is_dispatchable
        if dispatchable:
            queues = self.consume_queues.get(request.topic)  # = find_consume_queue(create=True)
            queue = queues.get(request.queue_id) if queues is not None else None
            if queue is None:
                queue = self._new_consume_queue(request.topic, request.queue_id)
            try:
                queue.put(
                    request.physical_offset, request.size, request.tags_code, request.queue_offset
                )
            except OSError as exc:
                self._dispatch_failed(exc)
                return False
            queue.last_store_timestamp = request.store_timestamp
            if self.checkpoint is not None:
                self.checkpoint.logics_msg_timestamp = request.store_timestamp
        if self.index_service is not None and self._index_caught_up:
            self._index(request)
        if notify and dispatchable:
            for listener in self.arrival_listeners:
                listener(
                    request.topic, request.queue_id, request.queue_offset + 1, request.tags_code
                )
        return True

    def _index(self, request: DispatchRequest) -> None:
        index = self.index_service
        if index is None:
            return
        if request.sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK_TYPE:
            index.build_index(
                request.topic,
                request.physical_offset,
                request.store_timestamp,
                request.keys,
                request.uniq_key,
            )
        self.index_reput_offset = request.end_offset

    @property
    def index_behind_bytes(self) -> int:
        """How much dispatched CommitLog the index has not covered yet."""
        if self.index_service is None or self._index_caught_up:
            return 0
        return max(0, self.reput_from_offset - self.index_reput_offset)

    def catch_up_index(self, max_records: int | None = None) -> bool:
        """Index dispatched records the index lacks (owner thread); True once caught up."""
        if self.index_service is None or self._index_caught_up:
            return True
        target = self.reput_from_offset
        budget = max_records
        for scanned in self.commit_log.scan(self.index_reput_offset, target):
            if scanned.check.kind is not RecordKind.MESSAGE:
                break
            if budget is not None:
                if budget == 0:
                    return False
                budget -= 1
            self._index(self._request_from_record(scanned.offset, scanned.data))
        self.index_reput_offset = target
        self._index_caught_up = True
        return True

    def _dispatch_failed(self, exc: OSError) -> None:
        if exc.errno == errno.ENOSPC:
            reason = f"{DISK_FULL_REASON}: cannot write a ConsumeQueue file"
        else:
            reason = f"cannot write a ConsumeQueue file: {exc}"
        self.mark_not_writeable(reason)
        self._needs_reput = True

    def dispatch_pending(self, up_to_offset: int) -> int:
        """Dispatch appended records that end at or below ``up_to_offset`` (SYNC_FLUSH)."""
        pending = self._pending_dispatch
        count = 0
        while pending and pending[0].end_offset <= up_to_offset and not self._needs_reput:
            request = pending.popleft()
            if not self._dispatch(request, notify=True):
                pending.appendleft(request)
                break
            self.reput_from_offset = request.end_offset
            count += 1
        return count

    @property
    def dispatch_behind_bytes(self) -> int:
        return max(0, self.commit_log.max_offset - self.reput_from_offset)

    # ================================================================== consume queues

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(
            self.consume_queue_root,
            topic,
            queue_id,
            self.config.consume_queue_units_per_file,
            self.allocate_service,
        )
        self.consume_queues.setdefault(topic, {})[queue_id] = queue
        return queue

    def find_consume_queue(
        self, topic: str, queue_id: int, create: bool = False
    ) -> ConsumeQueue | None:
        queues = self.consume_queues.get(topic)
        if queues is not None:
            queue = queues.get(queue_id)
            if queue is not None:
                return queue
        if not create:
            return None
        return self._new_consume_queue(topic, queue_id)

    def _all_consume_queues(self) -> Iterable[ConsumeQueue]:
        for queues in list(self.consume_queues.values()):
            yield from list(queues.values())

    def topics(self) -> list[str]:
        return sorted(self.consume_queues)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self.consume_queues.get(topic, {}))

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.find_consume_queue(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        queue = self.find_consume_queue(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def delete_topic(self, topic: str) -> bool:
        """Drop a topic's ConsumeQueues (its records stay in the CommitLog until expiry).

        A tombstone (the CommitLog end at deletion, in ``config/deletedTopics.json``) keeps
        recovery from dispatching the old records again; the topic may be used afresh.
        """
        self._deleted_topics[topic] = self.commit_log.max_offset
        save_json(self._deleted_topics_path, self._deleted_topics)
        queues = self.consume_queues.pop(topic, None)
        if queues is None:
            return False
        for queue in queues.values():
            queue.destroy()
            self.commit_log.topic_queue_table.pop((topic, queue.queue_id), None)
        topic_dir = self.consume_queue_root / topic
        for queue_dir in list(topic_dir.glob("*")):
            if queue_dir.is_dir() and not any(queue_dir.iterdir()):
                queue_dir.rmdir()
        if topic_dir.is_dir() and not any(topic_dir.iterdir()):
            topic_dir.rmdir()
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
    ) -> GetMessageResult:
        """Read up to ``max_messages`` from ``offset`` of one queue (reference §10.3).

        ``group`` is accepted for parity with RocketMQ; reads do not depend on it. The first
        message is always returned, even when it alone exceeds the byte cap.
        """
        del group
        if self._closed:
            raise StoreClosedError("the store is closed")
        queue = self.find_consume_queue(topic, queue_id)
        if queue is None:
            return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        min_offset, max_offset = queue.min_offset, queue.max_offset
        status, next_offset = _position_status(offset, min_offset, max_offset)
        if status is not None:
            return GetMessageResult(status, next_offset, min_offset, max_offset)
        return self._read_units(
            queue, offset, max(1, max_messages), max_bytes, tag_filter, min_offset, max_offset
        )

    def _read_units(
        self,
        queue: ConsumeQueue,
        offset: int,
        max_messages: int,
        max_bytes: int | None,
        tag_filter: TagFilter | None,
        min_offset: int,
        max_offset: int,
    ) -> GetMessageResult:
        found = queue.get_units(offset, max(16_000, max_messages * 20))
        if found is None:
            return GetMessageResult(
                GetMessageStatus.OFFSET_FOUND_NULL,
                queue.roll_next_file(offset),
                min_offset,
                max_offset,
            )
        data, _ = found
        config = self.config
        memory_cap = config.max_transfer_bytes_in_memory
        if max_bytes is not None:
            memory_cap = min(memory_cap, max_bytes)
        disk_cap = min(memory_cap, config.max_transfer_bytes_in_disk)
        # A unit is "in disk" when maxPhyOffset - offsetPy > memory limit (reference §10.3).
        disk_threshold = self.commit_log.max_offset - self._memory_limit
        codes = None if tag_filter is None else tag_filter.codes
        find_file = self.commit_log.queue.find_by_offset
        count_in_disk = config.max_transfer_count_in_disk
        messages: list[StoredMessage] = []
        append = messages.append
        count = total = scanned = 0
        removed = in_disk = False
        # Records are decoded straight from the mapping of the CommitLog file of the
        # previous unit (a batch nearly always stays in one file): no lookup and no copy
        # of the record per message. ``readable_end`` 0 forces a lookup.
        buffer: mmap.mmap | bytes = b""
        file_start = readable_end = 0
        for physical, size, code in CQ_UNIT_STRUCT.iter_unpack(data):
            in_disk = physical < disk_threshold
            if count and (
                count >= max_messages
                or total + size > (disk_cap if in_disk else memory_cap)
                or (in_disk and count >= count_in_disk)
            ):
                break
            scanned += 1
            if size == PRE_BLANK_SIZE or (codes is not None and to_int32(code) not in codes):
                continue
            if physical < file_start or physical + size > readable_end:
                mapped = find_file(physical)
                if mapped is None:
                    removed = True  # no longer in the CommitLog
                    continue
                buffer = mapped.buffer
                file_start = mapped.file_from_offset
                readable_end = file_start + mapped.read_position
                if physical + size > readable_end:
                    removed = True  # not (or no longer) readable
                    readable_end = 0
                    continue
            try:
                message = decode_record(buffer, physical - file_start)
            except ValueError:  # the file was unmapped by the cleaner
                removed = True
                readable_end = 0
                continue
            append(message)
            count += 1
            total += size
        if count:
            status = GetMessageStatus.FOUND
        elif removed:  # a removed message before any found one
            status = GetMessageStatus.MESSAGE_WAS_REMOVING
        else:
            status = GetMessageStatus.NO_MATCHED_MESSAGE
        return GetMessageResult(status, offset + scanned, min_offset, max_offset, messages, in_disk)

    # ================================================================== lookups

    def look_message_by_offset(self, physical_offset: int) -> StoredMessage | None:
        """The record at a physical offset, or None."""
        data = self.commit_log.read_record(physical_offset)
        if data is None:
            return None
        check = check_record(data, 0, len(data), check_crc=False)
        if check.kind is not RecordKind.MESSAGE:
            return None
        return decode_record(data)

    def look_message_by_id(self, msg_id: str) -> StoredMessage | None:
        """The record an offsetMsgId points at; None when malformed or gone."""
        try:
            decoded = decode_msg_id(msg_id)
        except ValueError:
            return None
        message = self.look_message_by_offset(decoded.physical_offset)
        if message is None or message.physical_offset != decoded.physical_offset:
            return None
        return message

    def query_message(
        self, topic: str, key: str, max_num: int = 32, begin: int = 0, end: int | None = None
    ) -> list[StoredMessage]:
        """Messages of ``topic`` whose KEYS or UNIQ_KEY is ``key``, stored in [begin, end].

        The index compares hashes only; the real key is re-checked here. At most 64,
        oldest first.
        """
        if self.index_service is None:
            return []
        end = _now_ms() + 1000 if end is None else end
        offsets = self.index_service.query(topic, key, max_num, begin, end)
        found = []
        for offset in sorted(set(offsets)):
            message = self.look_message_by_offset(offset)
            if message is None or message.topic != topic:
                continue
            if key in message.keys or message.uniq_key == key:
                found.append(message)
        return found

    def store_time_of(self, physical_offset: int, size: int) -> int:
        return self.commit_log.store_time_of(physical_offset, size)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after ``timestamp_ms`` (0 for an unknown queue)."""
        queue = self.find_consume_queue(topic, queue_id)
        if queue is None:
            return 0
        return queue.offset_by_time(
            timestamp_ms, self.commit_log.store_time_of, self.commit_log.min_offset
        )

    def store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int:
        """Store time of the message at a queue offset; -1 when there is none."""
        queue = self.find_consume_queue(topic, queue_id)
        if queue is None or offset < 0:
            return -1
        unit = queue.get_unit(offset)
        if unit is None or unit[1] == PRE_BLANK_SIZE:
            return -1
        return self.commit_log.store_time_of(unit[0], unit[1])

    # ================================================================== flush

    def flush_commit_log(self, least_pages: int = 0) -> int:
        """Force CommitLog pages to disk (callable off the owner thread); the flushed offset.

        Flush listeners hear of every advance, on the flushing thread.
        """
        before = self.commit_log.flushed_where
        self.commit_log.flush(least_pages)
        if least_pages == 0 and self.checkpoint is not None:
            stamp = self.commit_log.queue.store_timestamp
            if stamp:
                self.checkpoint.physic_msg_timestamp = stamp
        flushed = self.commit_log.flushed_where
        if flushed != before:
            for listener in self.flush_listeners:
                listener(flushed)
        return flushed

    @property
    def flushed_offset(self) -> int:
        """The CommitLog offset up to which every byte is on disk."""
        return self.commit_log.flushed_where

    def wake_flush(self) -> None:
        """Ask the group commit (SYNC_FLUSH) to flush now; a no-op in ASYNC_FLUSH."""
        group_commit = self.group_commit
        if group_commit is not None:
            group_commit.wakeup()

    def request_flush(self, end_offset: int, on_done: Callable[[], None]) -> None:
        """SYNC_FLUSH: call ``on_done`` (on the flush thread) once ``end_offset`` is on disk.

        With ASYNC_FLUSH, or when no services run, ``on_done`` is called at once.
        """
        group_commit = self.group_commit
        if group_commit is None or group_commit.stopped:
            on_done()
            return
        group_commit.submit(end_offset, on_done)

    def wait_flushed(self, end_offset: int, timeout: float | None = None) -> bool:
        """Block until ``end_offset`` is on disk (for synchronous callers). False on timeout.

        The caller then dispatches with ``dispatch_pending(commit_log.flushed_where)``.
        """
        if self.group_commit is None:
            self.flush_commit_log(0)
            return self.commit_log.flushed_where >= end_offset
        done = threading.Event()
        self.request_flush(end_offset, done.set)
        if timeout is None:
            timeout = self.config.sync_flush_timeout_ms / 1000
        return done.wait(timeout)

    # ================================================================== retention

    def clean_once(self) -> int:
        """One pass of disk checks and file expiry (the clean service calls this)."""
        return self.cleaner.run_once()

    def after_commit_log_deleted(self) -> None:
        """Drop ConsumeQueue files below the new CommitLog min offset; fix min offsets."""
        min_physical = self.commit_log.min_offset
        for queue in self._all_consume_queues():
            queue.delete_expired_files(min_physical)
            queue.correct_min_offset(min_physical)
        if self.index_service is not None:
            self.index_service.delete_expired(min_physical)
        expired = [t for t, end in self._deleted_topics.items() if end <= min_physical]
        if expired:
            for topic in expired:
                del self._deleted_topics[topic]
            save_json(self._deleted_topics_path, self._deleted_topics)

    def flush_consume_queues(self, least_pages: int = 0) -> None:
        """Force ConsumeQueue pages; on a thorough flush also the checkpoint."""
        logics = self.checkpoint.logics_msg_timestamp if self.checkpoint is not None else 0
        for queue in self._all_consume_queues():
            queue.flush(least_pages)
        if least_pages == 0 and self.index_service is not None:
            self.index_service.flush()
        if least_pages == 0 and self.checkpoint is not None:
            # The value captured before the flush: never ahead of what is on disk.
            current = self.checkpoint.logics_msg_timestamp
            self.checkpoint.logics_msg_timestamp = logics
            self.checkpoint.flush()
            self.checkpoint.logics_msg_timestamp = current

    def flush_all(self) -> None:
        self.commit_log.queue.flush_all()
        self.flush_commit_log(0)
        for queue in self._all_consume_queues():
            queue.queue.flush_all()
        self.flush_consume_queues(0)

    # ================================================================== check

    def check(self, fix: bool = False) -> list[str]:
        """Consistency report: every unit points at a valid record of its queue, offsets are
        dense, the checkpoint is sane. Returns a list of problems (empty when healthy).

        With ``fix=True`` a queue with bad units is cut at its first bad unit.
        """
        problems = list(self.recovery_findings)
        min_physical = self.commit_log.min_offset
        for queue in self._all_consume_queues():
            problems.extend(self._check_queue(queue, min_physical, fix))
        problems.extend(self._check_checkpoint())
        return problems

    def _check_queue(self, queue: ConsumeQueue, min_physical: int, fix: bool) -> list[str]:
        problems: list[str] = []
        name = f"{queue.topic}/{queue.queue_id}"
        for index in range(queue.min_offset, queue.max_offset):
            unit = queue.get_unit(index)
            if unit is None:
                problems.append(f"consumequeue {name}: unit {index} is unreadable")
                break
            physical, size, _ = unit
            if size == PRE_BLANK_SIZE or physical < min_physical:
                continue
            problem = self._check_unit(queue, index, physical, size)
            if problem:
                problems.append(f"consumequeue {name}: unit {index} {problem}")
                if fix:
                    queue.truncate_dirty(physical)
                break
        next_offset = self.commit_log.topic_queue_table.get((queue.topic, queue.queue_id), 0)
        if next_offset != queue.max_offset:
            problems.append(
                f"consumequeue {name}: next queue offset {next_offset} != max offset "
                f"{queue.max_offset}"
            )
        return problems

    def _check_unit(self, queue: ConsumeQueue, index: int, physical: int, size: int) -> str:
        data = self.commit_log.read(physical, size)
        if data is None:
            return f"points at {physical}+{size}, beyond the CommitLog"
        check = check_record(data, 0, size, check_crc=True)
        if check.kind is not RecordKind.MESSAGE or check.size != size:
            reason = check.reason or check.kind.value
            return f"points at {physical}, which is not a valid record ({reason})"
        record = decode_record(data)
        if (record.topic, record.queue_id, record.queue_offset) != (
            queue.topic,
            queue.queue_id,
            index,
        ):
            return (
                f"points at a record of {record.topic}/{record.queue_id} "
                f"offset {record.queue_offset}"
            )
        return ""

    def _check_checkpoint(self) -> list[str]:
        checkpoint = self.checkpoint
        if checkpoint is None:
            return []
        now = _now_ms() + 60_000
        problems = []
        for name, value in (
            ("physicMsgTimestamp", checkpoint.physic_msg_timestamp),
            ("logicsMsgTimestamp", checkpoint.logics_msg_timestamp),
            ("indexMsgTimestamp", checkpoint.index_msg_timestamp),
        ):
            if value < 0 or value > now:
                problems.append(f"checkpoint {name} {value} is not a plausible time")
        return problems


def _position_status(
    offset: int, min_offset: int, max_offset: int
) -> tuple[GetMessageStatus | None, int]:
    """The status decided by the offset alone (reference §10.3), or None to read units."""
    if max_offset == 0:
        return GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0
    if offset < min_offset:
        return GetMessageStatus.OFFSET_TOO_SMALL, min_offset
    if offset == max_offset:
        return GetMessageStatus.OFFSET_OVERFLOW_ONE, offset
    if offset > max_offset:
        return GetMessageStatus.OFFSET_OVERFLOW_BADLY, min_offset if min_offset == 0 else max_offset
    return None, offset


def _load_tombstones(path: Path) -> dict[str, int]:
    data = load_json(path)
    if not isinstance(data, dict):
        return {}
    return {str(t): int(end) for t, end in data.items() if isinstance(end, int)}


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # pragma: no cover - every Linux has both
        return 8 * 1024**3

"""Read-only access to a store directory, for tools that run beside the server.

Everything here opens files with ``"rb"`` (plain reads, ``os.pread`` or a read-only ``mmap``)
and never takes the store lock, never writes, and never uses :class:`MessageStore`: the server
may be appending while a tool reads. That shapes every reader:

* CommitLog files are read up to the last complete record, in RocketMQ's format v1 or v2
  (5.x). :func:`storage.record.decode.check_record` decides: MESSAGE goes on, BLANK ends the file,
  END (zeros or a record cut short) and CORRUPT stop the walk for that file. A torn tail
  or a short last file is never an error.
* A record never straddles two files, so a byte range of one file is cut at record
  boundaries by walking TOTALSIZE from the file start or from a boundary already known
  (:func:`next_boundary`).
* ConsumeQueue offsets follow the rules :mod:`storage.consume_queue` writes down for the
  store too: the min offset is the first readable unit (no pre-blank filler, still pointing
  into the CommitLog), the max offset the number of valid units (the last file is partly
  zeros).
* Config files are decoded by :func:`storage.json_file.load_config` and its shape helpers,
  the same decoder the broker's managers use (``.bak`` fallback, RocketMQ's unquoted
  integer keys).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from storage.config_journal import read_journal
from storage.config_managers import (
    ConsumerOffsetManager,
    SubscriptionGroupManager,
    TopicConfigManager,
)
from storage.config_records import camel
from storage.consume_queue import (
    Unit,
    is_readable_unit,
    is_valid_unit,
    readable_start,
)
from storage.consume_queue_file import count_valid_units
from storage.errors import ConfigFileError
from storage.json_file import (
    as_object,
    decode_topic_group_table,
    load_config,
    load_json,
)
from storage.record.decode import Boundary, decode_record, read_store_timestamp, walk_records
from storage.record.layout import (
    CQ_UNIT_SIZE,
    CQ_UNIT_STRUCT,
    HEAD_BYTES,
    LONG_STRUCT,
    MESSAGE_MAGIC_CODES,
    PHYSICAL_OFFSET_POSITION,
    SIZE_AND_MAGIC,
    Buffer,
)
from storage.record.message import StoredMessage

COMMIT_LOG_DIR: Final = "commitlog"
CONSUME_QUEUE_DIR: Final = "consumequeue"
CONFIG_DIR: Final = "config"

# ConsumeQueue units are read in chunks of this many when walking (4096 units = 80 KiB).
_UNIT_CHUNK: Final = 4096


# --------------------------------------------------------------------------- files


@dataclass(frozen=True, slots=True)
class StoreFile:
    """One fixed-size store file, named by the offset it starts at."""

    path: Path
    start_offset: int
    size: int  # bytes on disk when listed (a short last file is possible)

    @property
    def end_offset(self) -> int:
        """The offset just past the file's last byte."""
        return self.start_offset + self.size


def _list_files(directory: Path) -> list[StoreFile]:
    """Files named by a decimal offset, sorted by offset; vanished files are left out."""
    try:
        entries = list(directory.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    files = []
    for path in entries:
        if not path.name.isdigit():
            continue
        try:
            stat = path.stat()
        except FileNotFoundError:  # deleted by the server's cleaner meanwhile
            continue
        if path.is_file():
            files.append(StoreFile(path, int(path.name), stat.st_size))
    files.sort(key=lambda f: f.start_offset)
    return files


def commit_log_files(store_dir: Path) -> list[StoreFile]:
    """The CommitLog files of a store directory, oldest first."""
    return _list_files(Path(store_dir) / COMMIT_LOG_DIR)


def commit_log_min_offset(store_dir: Path) -> int:
    """Start offset of the first CommitLog file; -1 when there is none."""
    files = commit_log_files(store_dir)
    return files[0].start_offset if files else -1


@contextmanager
def map_read_only(path: Path) -> Iterator[Buffer]:
    """Map ``path`` read-only for the duration of the block (``b""`` for an empty file)."""
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            yield b""
            return
        view = mmap.mmap(file.fileno(), size, access=mmap.ACCESS_READ)
        try:
            yield view
        finally:
            view.close()


def buffer_size(buffer: Buffer) -> int:
    """Number of bytes in a mapped file or bytes-like buffer."""
    if isinstance(buffer, mmap.mmap):
        return buffer.size()
    return len(buffer)


# --------------------------------------------------------------------------- CommitLog walks


def next_boundary(buffer: Buffer, known: int, target: int, limit: int | None = None) -> Boundary:
    """The first record boundary at or after ``target``, walking from the boundary ``known``.

    ``known`` must be a record boundary (0, the start of every file, always is). The walk
    (:func:`~storage.record.decode.walk_records`) stops early at a BLANK, END or CORRUPT
    position, which is returned instead. ``limit`` is the end of readable data (default:
    the whole buffer).
    """
    end = buffer_size(buffer) if limit is None else limit
    return walk_records(buffer, known, target, end)[1]


def scan_records(
    buffer: Buffer,
    start: int = 0,
    end: int | None = None,
    limit: int | None = None,
    check_crc: bool = False,
) -> Iterator[tuple[int, int]]:
    """``(position, size)`` of every complete record that starts in ``[start, end)``.

    ``start`` must be a record boundary. The scan stops at the first BLANK, END or CORRUPT
    position (use :func:`scan_stop` to learn which); ``end`` defaults to the end of data.
    """
    data_end = buffer_size(buffer) if limit is None else limit
    stop_at = data_end if end is None else min(end, data_end)
    positions, stop = walk_records(buffer, start, stop_at, data_end, check_crc)
    # Each record ends where the next one starts, the last one at the boundary.
    for position, record_end in zip(positions, [*positions[1:], stop.position], strict=False):
        yield position, record_end - position


def scan_stop(buffer: Buffer, start: int = 0, limit: int | None = None) -> Boundary:
    """Where a walk from the boundary ``start`` stops: the end of the file's valid records."""
    end = buffer_size(buffer) if limit is None else limit
    return next_boundary(buffer, start, end + 1, end)


@dataclass(frozen=True, slots=True)
class CommitLogRecord:
    """A decoded record and the absolute CommitLog offset it was read at."""

    commit_log_offset: int
    message: StoredMessage


def read_records(
    file: StoreFile, start: int = 0, end: int | None = None, check_crc: bool = False
) -> Iterator[CommitLogRecord]:
    """Decode the complete records of one CommitLog file that start in ``[start, end)``.

    Positions are relative to the file; ``start`` must be a record boundary. A file that
    vanished (deleted by the server's cleaner) yields nothing.
    """
    try:
        with map_read_only(file.path) as buffer:
            for position, _size in scan_records(buffer, start, end, check_crc=check_crc):
                yield CommitLogRecord(file.start_offset + position, decode_record(buffer, position))
    except FileNotFoundError:
        return


def iter_store_records(store_dir: Path, check_crc: bool = False) -> Iterator[CommitLogRecord]:
    """Every complete record of a store, in CommitLog order (the pure-Python reference)."""
    for file in commit_log_files(store_dir):
        yield from read_records(file, check_crc=check_crc)


def first_store_timestamp(file: StoreFile) -> int | None:
    """STORETIMESTAMP of the file's first record, or None when it holds none yet."""
    try:
        with open(file.path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except FileNotFoundError:
        return None
    return _store_timestamp_of_head(head, file.start_offset)


def store_timestamp_at(buffer: Buffer, position: int, limit: int | None = None) -> int | None:
    """STORETIMESTAMP of the record at ``position`` of a mapped file, None if none is there."""
    end = buffer_size(buffer) if limit is None else limit
    if position + HEAD_BYTES > end:
        head = bytes(buffer[position:end])
    else:
        head = bytes(buffer[position : position + HEAD_BYTES])
    return _store_timestamp_of_head(head, None)


def _store_timestamp_of_head(head: bytes, physical_offset: int | None) -> int | None:
    """Store time from the first bytes of a record; checks magic (and offset when given)."""
    if len(head) < HEAD_BYTES:
        return None
    _total, magic = SIZE_AND_MAGIC.unpack_from(head, 0)
    if magic not in MESSAGE_MAGIC_CODES:
        return None
    if physical_offset is not None:
        stored_offset = LONG_STRUCT.unpack_from(head, PHYSICAL_OFFSET_POSITION)[0]
        if stored_offset != physical_offset:
            return None
    return read_store_timestamp(head, 0)


def read_commit_log(store_dir: Path, physical_offset: int, size: int) -> bytes | None:
    """``size`` bytes at an absolute CommitLog offset, or None when not (or no longer) there."""
    for file in commit_log_files(store_dir):
        if file.start_offset <= physical_offset < file.end_offset:
            position = physical_offset - file.start_offset
            if position + size > file.size:
                return None
            try:
                fd = os.open(file.path, os.O_RDONLY)
            except FileNotFoundError:
                return None
            try:
                data = os.pread(fd, size, position)
            finally:
                os.close(fd)
            return data if len(data) == size else None
    return None


def store_timestamp_at_offset(store_dir: Path, physical_offset: int) -> int | None:
    """STORETIMESTAMP of the record at an absolute CommitLog offset, or None."""
    head = read_commit_log(store_dir, physical_offset, HEAD_BYTES)
    if head is None:
        return None
    return _store_timestamp_of_head(head, physical_offset)


# --------------------------------------------------------------------------- ConsumeQueue


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    """A queue's logical offsets: ``min_offset`` is the first readable, ``max_offset`` the next
    to be written (exclusive)."""

    topic: str
    queue_id: int
    min_offset: int
    max_offset: int

    @property
    def message_count(self) -> int:
        """Messages still readable in the queue."""
        return self.max_offset - self.min_offset


def consume_queue_topics(store_dir: Path) -> list[str]:
    """Topics that have a ConsumeQueue directory, sorted."""
    root = Path(store_dir) / CONSUME_QUEUE_DIR
    try:
        return sorted(p.name for p in root.iterdir() if p.is_dir())
    except FileNotFoundError:
        return []


def consume_queue_ids(store_dir: Path, topic: str) -> list[int]:
    """Queue ids of a topic that have a ConsumeQueue directory, sorted."""
    root = Path(store_dir) / CONSUME_QUEUE_DIR / topic
    try:
        return sorted(int(p.name) for p in root.iterdir() if p.is_dir() and p.name.isdigit())
    except FileNotFoundError:
        return []


def consume_queue_files(store_dir: Path, topic: str, queue_id: int) -> list[StoreFile]:
    """The ConsumeQueue files of one queue, oldest first (names are byte offsets)."""
    return _list_files(Path(store_dir) / CONSUME_QUEUE_DIR / topic / str(queue_id))


def _read_units(path: Path, first_unit: int, count: int) -> bytes:
    """Raw bytes of ``count`` units from unit ``first_unit`` of a file (short at its end)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b""
    try:
        return os.pread(fd, count * CQ_UNIT_SIZE, first_unit * CQ_UNIT_SIZE)
    finally:
        os.close(fd)


def _unit_at(path: Path, index: int) -> Unit | None:
    """The unit at ``index`` of one file, or None past its end."""
    data = _read_units(path, index, 1)
    if len(data) < CQ_UNIT_SIZE:
        return None
    offset, size, code = CQ_UNIT_STRUCT.unpack(data)
    return int(offset), int(size), int(code)


def _valid_units_in_file(file: StoreFile) -> int:
    """How many leading units of a file are valid (:func:`count_valid_units`)."""

    def unit_at(index: int) -> Unit:
        return _unit_at(file.path, index) or (-1, 0, 0)  # a file cut meanwhile ends there

    return count_valid_units(unit_at, file.size // CQ_UNIT_SIZE)


def _max_offset(files: list[StoreFile]) -> int:
    """Total units up to the first invalid one (the queue's max offset)."""
    if not files:
        return 0
    end_bytes = files[0].start_offset
    for file in files:
        valid = _valid_units_in_file(file)
        end_bytes = file.start_offset + valid * CQ_UNIT_SIZE
        if valid < file.size // CQ_UNIT_SIZE:
            break
    return end_bytes // CQ_UNIT_SIZE


def _file_units(file: StoreFile, count: int) -> Iterator[Unit]:
    """The first ``count`` units of a file, read a chunk at a time."""
    for chunk_start in range(0, count, _UNIT_CHUNK):
        data = _read_units(file.path, chunk_start, min(_UNIT_CHUNK, count - chunk_start))
        yield from CQ_UNIT_STRUCT.iter_unpack(data[: len(data) // CQ_UNIT_SIZE * CQ_UNIT_SIZE])


def _min_offset(files: list[StoreFile], max_offset: int, commit_log_min: int) -> int:
    """The first readable unit (:func:`readable_start`) below ``max_offset``, else
    ``max_offset``."""
    for file in files:
        first_index = file.start_offset // CQ_UNIT_SIZE
        count = min(file.size // CQ_UNIT_SIZE, max_offset - first_index)
        if count <= 0:
            break
        skipped, found = readable_start(_file_units(file, count), commit_log_min)
        if found:
            return first_index + skipped
        if skipped < count:  # an invalid unit: the end of the queue's data
            break
    return max_offset


def queue_offsets(
    store_dir: Path, topic: str, queue_id: int, commit_log_min: int | None = None
) -> QueueOffsets:
    """Min and max logical offsets of one queue, read from its files.

    ``commit_log_min`` is the CommitLog's min offset (read from the store when not given);
    units pointing below it refer to deleted records and are not readable.
    """
    files = consume_queue_files(store_dir, topic, queue_id)
    if commit_log_min is None:
        commit_log_min = commit_log_min_offset(store_dir)
    max_offset = _max_offset(files)
    min_offset = _min_offset(files, max_offset, commit_log_min)
    return QueueOffsets(topic, queue_id, min_offset, max_offset)


def all_queue_offsets(store_dir: Path) -> list[QueueOffsets]:
    """Offsets of every queue of every topic of a store, sorted by topic and queue id."""
    commit_log_min = commit_log_min_offset(store_dir)
    return [
        queue_offsets(store_dir, topic, queue_id, commit_log_min)
        for topic in consume_queue_topics(store_dir)
        for queue_id in consume_queue_ids(store_dir, topic)
    ]


def read_unit(store_dir: Path, topic: str, queue_id: int, offset: int) -> Unit | None:
    """The unit at a logical offset of a queue; None when there is no valid unit there."""
    if offset < 0:
        return None
    byte_offset = offset * CQ_UNIT_SIZE
    for file in consume_queue_files(store_dir, topic, queue_id):
        if file.start_offset <= byte_offset < file.end_offset:
            unit = _unit_at(file.path, (byte_offset - file.start_offset) // CQ_UNIT_SIZE)
            return unit if unit is not None and is_valid_unit(unit[0], unit[1]) else None
    return None


def store_timestamp_at_queue_offset(
    store_dir: Path, topic: str, queue_id: int, offset: int
) -> int | None:
    """Store time (ms) of the message at a queue offset, via its unit and the CommitLog.

    None when the offset holds no unit, a pre-blank unit, or a unit whose record is gone.
    """
    unit = read_unit(store_dir, topic, queue_id, offset)
    # min physical offset 0: a record below the CommitLog's min offset is found gone when read.
    if unit is None or not is_readable_unit(unit[0], unit[1], 0):
        return None
    return store_timestamp_at_offset(store_dir, unit[0])


# --------------------------------------------------------------------------- config files


def read_config(store_dir: Path, file_name: str) -> object | None:
    """A config file of ``<store>/config/`` decoded (``.bak`` fallback); None when absent."""
    return load_json(Path(store_dir) / CONFIG_DIR / file_name)


@dataclass(frozen=True, slots=True)
class ConsumerOffsets:
    """consumerOffset.json: per (topic, group), each queue's next offset and last commit time."""

    offsets: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    commit_times: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)

    def groups(self) -> list[str]:
        """Every group with a committed offset, sorted."""
        return sorted({group for _topic, group in self.offsets})

    def topics_of(self, group: str) -> list[str]:
        """Topics on which ``group`` committed an offset, sorted."""
        return sorted(topic for topic, g in self.offsets if g == group)


def read_consumer_offsets(store_dir: Path) -> ConsumerOffsets:
    """``config/consumerOffset.json`` of a store (empty when the file does not exist).

    Raises ConfigFileError when the file (and its backup) cannot be read or has a wrong shape.
    """
    path = Path(store_dir) / CONFIG_DIR / ConsumerOffsetManager.file_name
    root = load_config(path)
    try:
        return ConsumerOffsets(
            offsets=decode_topic_group_table(root.get("offsetTable", {}), "offsetTable"),
            commit_times=decode_topic_group_table(
                root.get("commitTimeTable", {}), "commitTimeTable"
            ),
        )
    except ValueError as exc:
        raise ConfigFileError(f"config file {path}: {exc}") from exc


def read_subscription_groups(store_dir: Path) -> dict[str, dict[str, object]]:
    """``subscriptionGroupTable`` of ``config/subscriptionGroup.json``: group -> its fields."""
    return _named_table(store_dir, SubscriptionGroupManager)


def read_topic_configs(store_dir: Path) -> dict[str, dict[str, object]]:
    """``topicConfigTable`` of ``config/topics.json``: topic -> its fields."""
    return _named_table(store_dir, TopicConfigManager)


def _named_table(
    store_dir: Path, manager: type[TopicConfigManager | SubscriptionGroupManager]
) -> dict[str, dict[str, object]]:
    """The table of a versioned config file and its journal, read the way its manager
    reads them."""
    path, key = Path(store_dir) / CONFIG_DIR / manager.file_name, manager.table_key
    try:
        table = as_object(load_config(path).get(key, {}), key)
        entries = {name: as_object(entry, f"{key}[{name!r}]") for name, entry in table.items()}
        for change in read_journal(path):  # changes since the file was last written whole
            if "put" in change:
                fields = as_object(change["put"], "put")
                entries[str(fields.get(camel(manager.name_field), ""))] = fields
            elif "delete" in change:
                entries.pop(str(change["delete"]), None)
        return entries
    except ValueError as exc:
        raise ConfigFileError(f"config file {path}: {exc}") from exc

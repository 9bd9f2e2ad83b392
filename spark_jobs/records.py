"""CommitLog records as Arrow record batches: the row parsers of the Spark jobs, without pyspark.

Records come in RocketMQ's format v1 (``MESSAGE_MAGIC_CODE``, a one-byte topic length) or v2
(``MESSAGE_MAGIC_CODE_V2``, RocketMQ 5.x, a two-byte topic length), with IPv4 or IPv6 born
and store hosts (SYSFLAG says which); one file may mix them.

:func:`build_batch` gathers the header fields, bodies, topics and properties of many records
at once with numpy (:mod:`~spark_jobs.arrays`), whatever their layout, and splits the
properties into columns with numpy too (:mod:`~spark_jobs.properties_column`).
:func:`rows_to_batch` over :func:`record_row` builds the same batches from decoded
:class:`~storage.record.message.StoredMessage` objects: the reference in tests.

:func:`range_records` reads the answer of a broker's range read (records as the CommitLog
stores them, one after another) the same way: the HTTP source and the store-directory source
share one decoder.

:func:`walk_chain` finds the records of a byte range of one CommitLog file with the store's
own framing (:func:`storage.record.decode.walk_records`, without CRC unless asked): a BLANK
ends the file; END (zeros, a record cut short) and CORRUPT stop it. Only the batch building
is a vectorised copy of the record decoder, kept for speed and checked against
:func:`~storage.record.decode.decode_record` by the tests over every kind of record.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from spark_jobs.arrays import (
    Bytes,
    Int64Array,
    big_endian,
    gather,
    gather_ranges,
    hex_strings,
    offsets_of,
    string_array,
)
from spark_jobs.properties_column import KEYS_TYPE, PROPERTIES_TYPE, properties_columns
from storage.record.decode import Boundary, walk_records
from storage.record.layout import (
    BORN_HOST_POSITION,
    BORN_TIMESTAMP_POSITION,
    BORNHOST_V6_FLAG,
    HOST_V4_SIZE,
    HOST_V6_SIZE,
    LONG_STRUCT,
    MAGIC_POSITION,
    MESSAGE_MAGIC_CODE_V2,
    PHYSICAL_OFFSET_POSITION,
    QUEUE_ID_POSITION,
    QUEUE_OFFSET_POSITION,
    RECORD_HEADER_V4,
    STOREHOSTADDRESS_V6_FLAG,
    SYSFLAG_POSITION,
    Buffer,
)
from storage.record.message import StoredMessage
from storage.record.properties import decode_properties, shown_properties
from storage.sql92 import Sql92Filter
from storage.store_reader import buffer_size

COLUMNS: Final = (
    "topic",
    "queue_id",
    "queue_offset",
    "commit_log_offset",
    "size",
    "msg_id",
    "uniq_key",
    "tags",
    "keys",
    "properties",
    "body",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "sys_flag",
    "store_dir",
)
"""The DataFrame's columns, in order."""

TIMESTAMP_TYPE: Final = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA: Final = pa.schema(
    [
        pa.field("topic", pa.string(), nullable=False),
        pa.field("queue_id", pa.int32(), nullable=False),
        pa.field("queue_offset", pa.int64(), nullable=False),
        pa.field("commit_log_offset", pa.int64(), nullable=False),
        pa.field("size", pa.int32(), nullable=False),
        pa.field("msg_id", pa.string(), nullable=False),
        pa.field("uniq_key", pa.string(), nullable=True),
        pa.field("tags", pa.string(), nullable=True),
        pa.field("keys", KEYS_TYPE, nullable=False),
        pa.field("properties", PROPERTIES_TYPE, nullable=False),
        pa.field("body", pa.binary(), nullable=False),
        pa.field("born_timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("store_timestamp", TIMESTAMP_TYPE, nullable=False),
        pa.field("reconsume_times", pa.int32(), nullable=False),
        pa.field("sys_flag", pa.int32(), nullable=False),
        pa.field("store_dir", pa.string(), nullable=False),
    ]
)
"""Arrow schema of the batches; equal to what Spark derives from the DataFrame schema."""

# The first 48 bytes of every record, whatever its hosts: up to the born host (the layout's
# positions, as a numpy record type).
_HEAD_DTYPE: Final = np.dtype(
    {
        "names": ["total_size", "magic", "queue_id", "queue_offset", "sys_flag", "born_timestamp"],
        "formats": [">i4", ">i4", ">i4", ">i8", ">i4", ">i8"],
        "offsets": [
            0,
            MAGIC_POSITION,
            QUEUE_ID_POSITION,
            QUEUE_OFFSET_POSITION,
            SYSFLAG_POSITION,
            BORN_TIMESTAMP_POSITION,
        ],
        "itemsize": BORN_HOST_POSITION,
    }
)


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Which records a read keeps: topics (None = all), a store-time window [from, to), and
    a SQL92 filter on their properties (``sql``, RocketMQ's grammar: :mod:`storage.sql92`)."""

    topics: frozenset[str] | None = None
    from_ms: int | None = None
    to_ms: int | None = None
    sql: str | None = None

    def keeps_time(self, store_timestamp: int) -> bool:
        """Whether a store time (ms) is inside the window."""
        if self.from_ms is not None and store_timestamp < self.from_ms:
            return False
        return self.to_ms is None or store_timestamp < self.to_ms

    def keeps(self, topic: str, store_timestamp: int) -> bool:
        """Whether a record of ``topic`` stored at ``store_timestamp`` is kept."""
        return (self.topics is None or topic in self.topics) and self.keeps_time(store_timestamp)

    @property
    def keeps_all(self) -> bool:
        """Whether the filter keeps every record."""
        return (
            self.topics is None and self.from_ms is None and self.to_ms is None and self.sql is None
        )


KEEP_ALL: Final = RecordFilter()


# --------------------------------------------------------------------------- walking


@dataclass(frozen=True, slots=True)
class Chain:
    """The records found in a byte range: their positions, and where the walk ended.

    ``stop`` is a MESSAGE boundary when the walk reached the end of the range where another
    record starts (its magic code is there; the record is checked when it is read),
    otherwise the BLANK, END or CORRUPT position that ended the file's valid data.
    """

    positions: Int64Array
    stop: Boundary


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each record's variable fields are, relative to its start (one entry a record)."""

    born_host_width: Int64Array
    store_host_width: Int64Array
    header: Int64Array  # up to and including BODY LENGTH: 88, +12 per IPv6 host
    topic_length_width: Int64Array  # 1 (v1) or 2 (v2)

    @classmethod
    def of_fields(cls, sys_flag: Any, magic: Any) -> _Layout:
        """The layouts of records with these SYSFLAG and MAGICCODE values."""
        born = np.where(sys_flag & BORNHOST_V6_FLAG, HOST_V6_SIZE, HOST_V4_SIZE).astype(np.int64)
        store = np.where(sys_flag & STOREHOSTADDRESS_V6_FLAG, HOST_V6_SIZE, HOST_V4_SIZE)
        store = store.astype(np.int64)
        header = RECORD_HEADER_V4.size + (born - HOST_V4_SIZE) + (store - HOST_V4_SIZE)
        topic_width = np.where(magic == MESSAGE_MAGIC_CODE_V2, 2, 1).astype(np.int64)
        return cls(born, store, header, topic_width)

    def take(self, index: Int64Array) -> _Layout:
        """The layouts at ``index`` only."""
        return _Layout(
            self.born_host_width[index],
            self.store_host_width[index],
            self.header[index],
            self.topic_length_width[index],
        )

    @property
    def store_timestamp_at(self) -> Int64Array:
        return BORN_HOST_POSITION + self.born_host_width

    @property
    def store_host_at(self) -> Int64Array:
        return self.store_timestamp_at + LONG_STRUCT.size

    @property
    def reconsume_times_at(self) -> Int64Array:
        return self.store_host_at + self.store_host_width


def _topic_lengths(data: Bytes, at: Int64Array, width: Int64Array) -> Int64Array:
    """TOPIC LENGTH at each absolute position: an unsigned byte (v1) or a short (v2)."""
    one = np.take(data, at, mode="clip").astype(np.int64)
    two = big_endian(data, at, ">i2")
    return np.where(width == 2, two, one)


def walk_chain(
    buffer: Buffer,
    start: int,
    end: int | None = None,
    limit: int | None = None,
    check_crc: bool = False,
) -> Chain:
    """The complete, valid records that start in ``[start, end)`` of one file's buffer.

    ``start`` must be a record boundary; ``end`` defaults to the end of data and ``limit``
    (the end of readable bytes) to the buffer's size. The walk is the store's
    (:func:`~storage.record.decode.walk_records`); the positions come as a numpy array.
    """
    size = buffer_size(buffer)
    data_end = size if limit is None else min(limit, size)
    range_end = data_end if end is None else min(end, data_end)
    found, stop = walk_records(buffer, start, range_end, data_end, check_crc)
    positions = np.frombuffer(found, dtype=np.int64) if len(found) else np.empty(0, np.int64)
    return Chain(positions, stop)


def range_records(records: bytes) -> tuple[Bytes, Int64Array]:
    """The bytes of a broker's range read (records one after another, as stored) as a numpy
    array, and where each record starts; ValueError when they are not whole records."""
    chain = walk_chain(records, 0)
    if chain.stop.position != len(records):
        raise ValueError(
            f"a range of records breaks off at byte {chain.stop.position} of {len(records)}: "
            f"{chain.stop.kind.name} {chain.stop.reason or ''}".rstrip()
        )
    return np.frombuffer(records, dtype=np.uint8), chain.positions


def properties_without(properties: Any, names: Sequence[str]) -> Any:
    """A properties map column without the entries named ``names`` (e.g. TAGS and KEYS,
    which have columns of their own)."""
    offsets = np.asarray(properties.offsets.to_numpy(), dtype=np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    keys, items = properties.keys, properties.items
    if len(keys) != last - first:  # the whole child of a slice
        keys, items = keys.slice(first, last - first), items.slice(first, last - first)
    dropped = np.asarray(
        pc.is_in(keys, value_set=pa.array(list(names), pa.string())).to_numpy(zero_copy_only=False),
        dtype=bool,
    )
    if not dropped.any():
        return properties
    kept = np.flatnonzero(~dropped)
    owners = np.repeat(np.arange(len(properties), dtype=np.int64), np.diff(offsets))
    counts = np.bincount(owners[kept], minlength=len(properties)).astype(np.int64)
    index = pa.array(kept)
    return pa.MapArray.from_arrays(
        pa.array(offsets_of(counts).astype(np.int32)),
        keys.take(index),
        items.take(index),
        type=PROPERTIES_TYPE,
    )


# --------------------------------------------------------------------------- vectorised batches


def _timestamps(milliseconds: Int64Array) -> Any:
    return pa.array(milliseconds * 1000, type=TIMESTAMP_TYPE)


def _topics(data: Bytes, topic_at: Int64Array, width: Int64Array) -> tuple[Any, Int64Array]:
    """Topic strings from each record's TOPIC LENGTH field (absolute positions), and where
    each record's PROPERTIES LENGTH field is."""
    topic_length = _topic_lengths(data, topic_at, width)
    start = topic_at + width
    values, offsets = gather_ranges(data, start, topic_length)
    return string_array(values, offsets), start + topic_length


def build_batch(
    data: Bytes,
    positions: Int64Array,
    file_start: int,
    store_dir: str,
    record_filter: RecordFilter = KEEP_ALL,
) -> Any:
    """One Arrow record batch of the valid records at ``positions`` of a file's bytes.

    ``file_start`` is the file's CommitLog offset (positions are relative to the file).
    Records outside ``record_filter`` are left out before their bodies are copied.
    """
    if len(positions) == 0:
        return empty_batch()
    parsed = _Records.of(data, positions)
    keep = _keep_mask(parsed.topics, parsed.store_ms, record_filter)
    if keep is not None:
        parsed = parsed.take(np.flatnonzero(keep))
    if record_filter.sql is not None and len(parsed.positions):
        parsed = parsed.take(np.flatnonzero(_sql_mask(data, parsed, record_filter.sql)))
    if len(parsed.positions) == 0:
        return empty_batch()
    return _vector_batch(data, parsed, file_start, store_dir)


def _sql_mask(data: Bytes, records: _Records, sql: str) -> Any:
    """Which records' properties pass the SQL92 filter ``sql``: each record's properties
    decoded and tested, as the broker tests them (only reads with a filter pay for it)."""
    test = compiled_sql(sql).matches
    lengths = big_endian(data, records.properties_at, ">i2")
    return np.fromiter(
        (
            test(decode_properties(data[at + 2 : at + 2 + length].tobytes()))
            for at, length in zip(records.properties_at.tolist(), lengths.tolist(), strict=True)
        ),
        dtype=bool,
        count=len(lengths),
    )


@functools.lru_cache(maxsize=16)
def compiled_sql(sql: str) -> Sql92Filter:
    """``sql`` compiled once per worker process (filters travel to executors as text)."""
    return Sql92Filter(sql)


@dataclass(frozen=True, slots=True)
class _Records:
    """The header fields of records, their topics, and where their properties are: what
    filtering needs before the bodies are copied."""

    positions: Int64Array
    head: Any  # the first 48 bytes of each record, viewed as _HEAD_DTYPE records
    layout: _Layout
    body_length: Int64Array
    store_ms: Int64Array
    topics: Any
    properties_at: Int64Array

    @classmethod
    def of(cls, data: Bytes, positions: Int64Array) -> _Records:
        """Gather the records at ``positions``."""
        head = gather(data, positions, _HEAD_DTYPE.itemsize).view(_HEAD_DTYPE).reshape(-1)
        layout = _Layout.of_fields(head["sys_flag"], head["magic"])
        body_length = big_endian(data, positions + layout.header - 4, ">i4")
        store_ms = big_endian(data, positions + layout.store_timestamp_at, ">i8")
        topic_at = positions + layout.header + body_length
        topics, properties_at = _topics(data, topic_at, layout.topic_length_width)
        return cls(positions, head, layout, body_length, store_ms, topics, properties_at)

    def take(self, index: Int64Array) -> _Records:
        """The records at ``index`` only."""
        return _Records(
            self.positions[index],
            self.head[index],
            self.layout.take(index),
            self.body_length[index],
            self.store_ms[index],
            self.topics.take(pa.array(index)),
            self.properties_at[index],
        )


def _keep_mask(topics: Any, store_ms: Int64Array, record_filter: RecordFilter) -> Any:
    """The records a filter keeps, or None when it keeps them all."""
    if record_filter.keeps_all:
        return None
    keep = np.ones(len(store_ms), dtype=bool)
    if record_filter.topics is not None:
        wanted = pa.array(sorted(record_filter.topics), type=pa.string())
        matches = pc.is_in(topics, value_set=wanted)
        keep &= np.asarray(matches.to_numpy(zero_copy_only=False), dtype=bool)
    if record_filter.from_ms is not None:
        keep &= store_ms >= record_filter.from_ms
    if record_filter.to_ms is not None:
        keep &= store_ms < record_filter.to_ms
    return None if bool(keep.all()) else keep


def _msg_ids(data: Bytes, positions: Int64Array, layout: _Layout) -> Any:
    """offsetMsgIds: upper-case hex of store address + port + physical offset (32 digits with
    an IPv4 store host, 56 with IPv6), built per store-host width."""
    widths = layout.store_host_width
    parts, owners = [], []
    for width in np.unique(widths).tolist():
        index = np.flatnonzero(widths == width)
        at = positions[index]
        raw = np.concatenate(
            [
                gather(data, at + layout.store_host_at[index], width),
                gather(data, at + PHYSICAL_OFFSET_POSITION, LONG_STRUCT.size),
            ],
            axis=1,
        )
        parts.append(hex_strings(raw))
        owners.append(index)
    if len(parts) == 1:
        return parts[0]
    order = np.argsort(np.concatenate(owners), kind="stable")
    return pa.concat_arrays(parts).take(pa.array(order))


def _vector_batch(data: Bytes, records: _Records, file_start: int, store_dir: str) -> Any:
    positions, head, layout = records.positions, records.head, records.layout
    body_values, body_offsets = gather_ranges(data, positions + layout.header, records.body_length)
    properties_length = big_endian(data, records.properties_at, ">i2")
    raw_values, raw_offsets = gather_ranges(data, records.properties_at + 2, properties_length)
    properties = properties_columns(raw_values, raw_offsets)
    records.topics.validate(full=True)
    reconsume_times = big_endian(data, positions + layout.reconsume_times_at, ">i4")
    columns = [
        records.topics,
        pa.array(head["queue_id"].astype(np.int32)),
        pa.array(head["queue_offset"].astype(np.int64)),
        pa.array(positions + file_start),
        pa.array(head["total_size"].astype(np.int32)),
        _msg_ids(data, positions, layout),
        properties.uniq_key,
        properties.tags,
        properties.keys,
        properties.map,
        string_array(body_values, body_offsets, binary=True),
        _timestamps(head["born_timestamp"].astype(np.int64)),
        _timestamps(records.store_ms),
        pa.array(reconsume_times.astype(np.int32)),
        pa.array(head["sys_flag"].astype(np.int32)),
        pa.repeat(pa.scalar(store_dir, pa.string()), len(positions)),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def empty_batch() -> Any:
    """A batch with no rows."""
    return pa.RecordBatch.from_pylist([], schema=ARROW_SCHEMA)


# --------------------------------------------------------------------------- per-record rows


def record_row(message: StoredMessage, commit_log_offset: int, store_dir: str) -> dict[str, Any]:
    """One record as a row of the DataFrame (timestamps in microseconds since the epoch)."""
    return {
        "topic": message.topic,
        "queue_id": message.queue_id,
        "queue_offset": message.queue_offset,
        "commit_log_offset": commit_log_offset,
        "size": message.size,
        "msg_id": message.msg_id,
        "uniq_key": message.uniq_key,
        "tags": message.tags,
        "keys": message.keys,
        "properties": list(shown_properties(message.properties).items()),
        "body": message.body,
        "born_timestamp": message.born_timestamp * 1000,
        "store_timestamp": message.store_timestamp * 1000,
        "reconsume_times": message.reconsume_times,
        "sys_flag": message.sys_flag,
        "store_dir": store_dir,
    }


def rows_to_batch(rows: Sequence[dict[str, Any]]) -> Any:
    """An Arrow record batch of rows built by :func:`record_row`."""
    if not rows:
        return empty_batch()
    return pa.RecordBatch.from_pylist(list(rows), schema=ARROW_SCHEMA)


def batches(
    data: Bytes,
    positions: Int64Array,
    file_start: int,
    store_dir: str,
    record_filter: RecordFilter = KEEP_ALL,
    batch_size: int = 16_384,
) -> Iterator[Any]:
    """Non-empty record batches of at most ``batch_size`` records over ``positions``."""
    for first in range(0, len(positions), batch_size):
        batch = build_batch(
            data, positions[first : first + batch_size], file_start, store_dir, record_filter
        )
        if batch.num_rows:
            yield batch


def concat_batches(parts: Iterable[Any]) -> Any:
    """One table of several batches (a convenience for tests and tools)."""
    return pa.Table.from_batches(list(parts), schema=ARROW_SCHEMA)

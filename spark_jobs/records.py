"""CommitLog records as Arrow record batches: the row parsers of the Spark jobs, without pyspark.

Records come in RocketMQ's format v1 (``MESSAGE_MAGIC_CODE``, a one-byte topic length) or v2
(``MESSAGE_MAGIC_CODE_V2``, RocketMQ 5.x, a two-byte topic length), with IPv4 or IPv6 born
and store hosts (SYSFLAG says which); one file may mix them.

:func:`build_batch` gathers the header fields, bodies, topics and properties of many records
at once with numpy, whatever their layout, and splits properties into a map with numpy too.
A batch whose properties that path does not cover (a property name repeated in one record,
bytes that are not UTF-8) gets its properties decoded record by record with
:func:`storage.record.properties.decode_properties`; everything else stays vectorised.
:func:`rows_to_batch` over :func:`record_row` builds the same batches from decoded
:class:`~storage.record.message.StoredMessage` objects: the reference in tests.

:func:`walk_chain` finds the records of a byte range of one CommitLog file with the rules of
:func:`storage.record.decode.check_record` (without CRC unless asked): it follows TOTALSIZE and the
magic code record by record, then checks every record's field lengths against its TOTALSIZE
in one vectorised pass. A BLANK ends the file; END (zeros, a record cut short) and CORRUPT
stop it.
"""

from __future__ import annotations

import itertools
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from storage.record.decode import RecordKind
from storage.record.layout import (
    BLANK_MAGIC_CODE,
    BLANK_STRUCT,
    BORNHOST_V6_FLAG,
    CRC_MASK,
    FIXED_OVERHEAD_V4,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
    Buffer,
)
from storage.record.message import StoredMessage
from storage.record.properties import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
)
from storage.store_reader import Boundary

Int64Array = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]

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
KEYS_TYPE: Final = pa.list_(pa.field("element", pa.string(), nullable=False))
PROPERTIES_TYPE: Final = pa.map_(
    pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False)
)
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

V4_HEADER_SIZE: Final = 88  # up to and including BODY LENGTH, IPv4 born and store hosts
_IPV4_HOST: Final = 8  # address + port
_IPV6_HOST: Final = 20
_MIN_SIZE: Final = {
    MESSAGE_MAGIC_CODE: FIXED_OVERHEAD_V4,
    MESSAGE_MAGIC_CODE_V2: FIXED_OVERHEAD_V4 + 1,
}
"""The smallest record of each format: v2's topic length takes one byte more."""
# The first 48 bytes of every record, whatever its hosts: up to the born host.
_HEAD_DTYPE: Final = np.dtype(
    {
        "names": ["total_size", "magic", "queue_id", "queue_offset", "sys_flag", "born_timestamp"],
        "formats": [">i4", ">i4", ">i4", ">i8", ">i4", ">i8"],
        "offsets": [0, 4, 12, 20, 36, 40],
        "itemsize": 48,
    }
)
_BORN_HOST_AT: Final = 48
_PHYSICAL_OFFSET_AT: Final = 28
_HEX: Final = np.frombuffer(
    b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint8
).reshape(256, 2)
_SLICE_COPY_MIN_AVERAGE: Final = 48  # bytes per item from which slice copies win
_NAME_VALUE_SEPARATOR: Final = 1
_PROPERTY_SEPARATOR: Final = 2
_TAGS: Final = PROPERTY_TAGS.encode()
_KEYS: Final = PROPERTY_KEYS.encode()
_UNIQ_KEY: Final = PROPERTY_UNIQ_KEY.encode()


# --------------------------------------------------------------------------- filters


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """Which records a read keeps: topics (None = all) and a store-time window [from, to)."""

    topics: frozenset[str] | None = None
    from_ms: int | None = None
    to_ms: int | None = None

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
        return self.topics is None and self.from_ms is None and self.to_ms is None


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


def as_bytes(buffer: Buffer) -> Bytes:
    """A zero-copy uint8 view of a buffer (mmap, bytes, bytearray)."""
    return np.frombuffer(buffer, dtype=np.uint8)


def _gather(data: Bytes, starts: Int64Array, width: int) -> Bytes:
    """``width`` bytes at each start, as an (n, width) array; indexes past the end clip."""
    index = starts[:, None] + np.arange(width, dtype=np.int64)
    return np.take(data, index, mode="clip")


def _big_endian(data: Bytes, starts: Int64Array, dtype: str) -> Int64Array:
    """The big-endian integers of ``dtype`` at each start, widened to int64."""
    width = np.dtype(dtype).itemsize
    values = _gather(data, starts, width).view(dtype).reshape(-1)
    return values.astype(np.int64)


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where each record's variable fields are, relative to its start (one entry a record)."""

    born_host_width: Int64Array
    store_host_width: Int64Array
    header: Int64Array  # up to and including BODY LENGTH: 88, +12 per IPv6 host
    topic_length_width: Int64Array  # 1 (v1) or 2 (v2)

    @classmethod
    def of(cls, data: Bytes, positions: Int64Array) -> _Layout:
        """The layouts of the records at ``positions`` (magic codes already checked)."""
        sys_flag = _big_endian(data, positions + 36, ">i4")
        return cls.of_fields(sys_flag, _big_endian(data, positions + 4, ">i4"))

    @classmethod
    def of_fields(cls, sys_flag: Any, magic: Any) -> _Layout:
        """The layouts of records with these SYSFLAG and MAGICCODE values."""
        born = np.where(sys_flag & BORNHOST_V6_FLAG, _IPV6_HOST, _IPV4_HOST).astype(np.int64)
        store = np.where(sys_flag & STOREHOSTADDRESS_V6_FLAG, _IPV6_HOST, _IPV4_HOST)
        store = store.astype(np.int64)
        header = V4_HEADER_SIZE + (born - _IPV4_HOST) + (store - _IPV4_HOST)
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
        return _BORN_HOST_AT + self.born_host_width

    @property
    def store_host_at(self) -> Int64Array:
        return self.store_timestamp_at + 8

    @property
    def reconsume_times_at(self) -> Int64Array:
        return self.store_host_at + self.store_host_width


def _topic_lengths(
    data: Bytes, at: Int64Array, width: Int64Array, valid: npt.NDArray[np.bool_] | None = None
) -> Int64Array:
    """TOPIC LENGTH at each absolute position: an unsigned byte (v1) or a short (v2)."""
    safe = at if valid is None else np.where(valid, at, 0)
    one = np.take(data, safe, mode="clip").astype(np.int64)
    two = _big_endian(data, safe, ">i2")
    return np.where(width == 2, two, one)


def first_bad_layout(data: Bytes, positions: Int64Array) -> int:
    """Index of the first record whose field lengths disagree with its TOTALSIZE (or n).

    Vectorised form of the layout test of :func:`storage.record.decode.check_record`; each record
    must already have a valid magic code (v1 or v2) and fit in ``data``.
    """
    if len(positions) == 0:
        return 0
    total = _big_endian(data, positions, ">i4")
    layout = _Layout.of(data, positions)
    header, width = layout.header, layout.topic_length_width
    body_length = _big_endian(data, positions + header - 4, ">i4")
    topic_at = header + body_length
    ok = (header <= total) & (body_length >= 0) & (topic_at + width <= total)
    topic_length = _topic_lengths(data, positions + topic_at, width, ok)
    properties_at = topic_at + width + topic_length
    ok &= (topic_length >= 0) & (properties_at + 2 <= total)
    properties_length = _big_endian(data, positions + np.where(ok, properties_at, 0), ">i2")
    ok &= (properties_length >= 0) & (properties_at + 2 + properties_length == total)
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else len(positions)


def _first_bad_crc(data: Bytes, positions: Int64Array) -> int:
    """Index of the first record whose body CRC does not match (or n)."""
    if len(positions) == 0:
        return 0
    header = _Layout.of(data, positions).header
    body_length = _big_endian(data, positions + header - 4, ">i4")
    stored = _big_endian(data, positions + 8, ">i4")
    view = data.data
    for index, (start, length, crc) in enumerate(
        zip((positions + header).tolist(), body_length.tolist(), stored.tolist(), strict=True)
    ):
        if zlib.crc32(view[start : start + length]) & CRC_MASK != crc:
            return index
    return len(positions)


def _walk_magic(buffer: Buffer, start: int, end: int, limit: int) -> tuple[array[int], Boundary]:
    """Follow TOTALSIZE and the magic code from ``start``; stop at ``end`` or a non-record."""
    unpack = BLANK_STRUCT.unpack_from  # (int, int) at a position
    positions: array[int] = array("q")
    append = positions.append
    position = start
    while position < end:
        if position + 8 > limit:
            return positions, Boundary(position, RecordKind.END)
        total, magic = unpack(buffer, position)
        minimum = _MIN_SIZE.get(magic)
        if minimum is None:
            return positions, _stop_at(position, total, magic)
        if total < minimum:
            return positions, Boundary(
                position, RecordKind.CORRUPT, f"impossible record size {total}"
            )
        if position + total > limit:
            return positions, Boundary(position, RecordKind.END, "record is cut short")
        append(position)
        position += total
    if position + 8 > limit:
        return positions, Boundary(position, RecordKind.END)
    total, magic = unpack(buffer, position)
    if magic not in _MIN_SIZE:
        return positions, _stop_at(position, total, magic)
    return positions, Boundary(position, RecordKind.MESSAGE)  # checked when it is read


def _stop_at(position: int, total: int, magic: int) -> Boundary:
    if magic == BLANK_MAGIC_CODE:
        return Boundary(position, RecordKind.BLANK)
    if magic == 0 and total == 0:
        return Boundary(position, RecordKind.END)
    return Boundary(position, RecordKind.CORRUPT, f"unknown magic code {magic & 0xFFFFFFFF:#010x}")


def walk_chain(
    buffer: Buffer,
    start: int,
    end: int | None = None,
    limit: int | None = None,
    check_crc: bool = False,
) -> Chain:
    """The complete, valid records that start in ``[start, end)`` of one file's buffer.

    ``start`` must be a record boundary; ``end`` defaults to the end of data and ``limit``
    (the end of readable bytes) to the buffer's size. The same records as walking with
    :func:`storage.record.decode.check_record`, found faster.
    """
    data = as_bytes(buffer)
    data_end = len(data) if limit is None else min(limit, len(data))
    range_end = data_end if end is None else min(end, data_end)
    found, stop = _walk_magic(buffer, start, range_end, data_end)
    positions = np.frombuffer(found, dtype=np.int64) if len(found) else np.empty(0, np.int64)
    bad = first_bad_layout(data, positions)
    if bad < len(positions):
        stop = Boundary(int(positions[bad]), RecordKind.CORRUPT, "TOTALSIZE does not match")
        positions = positions[:bad]
    if check_crc:
        bad = _first_bad_crc(data, positions)
        if bad < len(positions):
            stop = Boundary(int(positions[bad]), RecordKind.CORRUPT, "body CRC mismatch")
            positions = positions[:bad]
    return Chain(positions, stop)


# --------------------------------------------------------------------------- vectorised batches


def _offsets(lengths: Int64Array) -> Int64Array:
    """Arrow offsets (n + 1) of items with these lengths."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def gather_ranges(data: Bytes, starts: Int64Array, lengths: Int64Array) -> tuple[Bytes, Int64Array]:
    """Concatenate ``data[start:start + length]`` for every item; returns (values, offsets).

    Long items (bodies) are copied slice by slice; short ones (topics, property names and
    values) through one index array, which is cheaper when items are a few bytes.
    """
    offsets = _offsets(lengths)
    total = int(offsets[-1])
    if total == 0:
        return np.empty(0, dtype=np.uint8), offsets
    if total >= _SLICE_COPY_MIN_AVERAGE * len(lengths):
        ends = (starts + lengths).tolist()
        values = np.concatenate([data[a:b] for a, b in zip(starts.tolist(), ends, strict=True)])
        return values, offsets
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return data[index], offsets


def _string_array(values: Bytes, offsets: Int64Array, binary: bool = False) -> Any:
    """An Arrow string (or binary) array over concatenated values and int32 offsets."""
    kind = pa.binary() if binary else pa.string()
    return pa.Array.from_buffers(
        kind,
        len(offsets) - 1,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)],
    )


def _hex_strings(raw: Bytes) -> Any:
    """Upper-case hex strings of the rows of an (n, k) byte matrix."""
    rows, width = raw.shape
    text = np.ascontiguousarray(_HEX[raw].reshape(rows, width * 2))
    offsets = np.arange(0, rows * width * 2 + 1, width * 2, dtype=np.int64)
    return _string_array(text.reshape(-1), offsets)


def _timestamps(milliseconds: Int64Array) -> Any:
    return pa.array(milliseconds * 1000, type=TIMESTAMP_TYPE)


@dataclass(frozen=True, slots=True)
class _Properties:
    """Parsed properties of n records: the map column and three looked-up values."""

    map: Any
    tags: Any
    keys: Any
    uniq_key: Any


class _NeedsSlowPath(Exception):
    """The vectorised parser does not cover this batch (duplicate names, invalid UTF-8)."""


def _segments(values: Bytes, offsets: Int64Array) -> tuple[Int64Array, Int64Array, Int64Array]:
    """Split every record's properties at ``\\x02``: (start, end, record) of each segment."""
    n = len(offsets) - 1
    separators = np.flatnonzero(values == _PROPERTY_SEPARATOR).astype(np.int64)
    owner = np.searchsorted(offsets, separators, side="right") - 1
    record_ids = np.arange(n, dtype=np.int64)
    starts = np.concatenate([offsets[:-1], separators + 1])
    start_owner = np.concatenate([record_ids, owner])
    ends = np.concatenate([offsets[1:], separators])
    end_owner = np.concatenate([record_ids, owner])
    start_order = np.lexsort((starts, start_owner))
    end_order = np.lexsort((ends, end_owner))
    return starts[start_order], ends[end_order], start_owner[start_order]


def _lookup(names: Any, values: Any, owners: Int64Array, n: int, name: bytes) -> Any:
    """Per record, the value of property ``name`` (null when absent)."""
    matches = np.flatnonzero(
        np.asarray(pc.equal(names, name.decode()).to_numpy(zero_copy_only=False))
    )
    index = np.full(n, -1, dtype=np.int64)
    index[owners[matches]] = matches
    return values.take(pa.array(index, mask=index < 0))


def _split_keys(keys: Any, n: int) -> Any:
    """``KEYS`` split on spaces, empty keys dropped; an empty list when there are none."""
    parts = pc.split_pattern(keys, " ")
    flat = parts.flatten()
    parents = np.asarray(pc.list_parent_indices(parts).to_numpy(zero_copy_only=False))
    lengths = np.asarray(pc.utf8_length(flat).to_numpy(zero_copy_only=False))
    kept = np.flatnonzero(lengths > 0)
    counts = np.bincount(parents[kept], minlength=n).astype(np.int64)
    return pa.ListArray.from_arrays(
        pa.array(_offsets(counts).astype(np.int32)), flat.take(pa.array(kept)), type=KEYS_TYPE
    )


def _has_repeated_names(names: Any, owners: Int64Array) -> bool:
    """Whether some record has the same property name twice."""
    if len(owners) == 0:
        return False
    encoded = names.dictionary_encode()
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    keys = np.sort(owners * len(encoded.dictionary) + codes)
    return bool(np.any(keys[1:] == keys[:-1]))


def _parse_properties(values: Bytes, offsets: Int64Array) -> _Properties:
    """Properties of n records (concatenated raw bytes) as a map, like ``decode_properties``."""
    n = len(offsets) - 1
    seg_start, seg_end, owner = _segments(values, offsets)
    name_value = np.flatnonzero(values == _NAME_VALUE_SEPARATOR).astype(np.int64)
    if len(name_value) == 0:  # no name=value pair in the whole batch
        cut = np.full(len(seg_start), -1, dtype=np.int64)
    else:
        at = np.searchsorted(name_value, seg_start, side="left")
        cut = np.where(at < len(name_value), name_value[np.minimum(at, len(name_value) - 1)], -1)
    kept = (cut >= 0) & (cut < seg_end) & (cut > seg_start) & (seg_end > cut + 1)
    index = np.flatnonzero(kept)
    owner, start, cut, end = owner[index], seg_start[index], cut[index], seg_end[index]
    name_bytes, name_offsets = gather_ranges(values, start, cut - start)
    value_bytes, value_offsets = gather_ranges(values, cut + 1, end - cut - 1)
    names = _string_array(name_bytes, name_offsets)
    items = _string_array(value_bytes, value_offsets)
    try:
        names.validate(full=True)
        items.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise _NeedsSlowPath("properties are not valid UTF-8") from exc
    if _has_repeated_names(names, owner):
        raise _NeedsSlowPath("a property name repeats within a record")
    counts = np.bincount(owner, minlength=n).astype(np.int64)
    map_offsets = pa.array(_offsets(counts).astype(np.int32))
    properties = pa.MapArray.from_arrays(map_offsets, names, items, type=PROPERTIES_TYPE)
    keys = _lookup(names, items, owner, n, _KEYS)
    return _Properties(
        map=properties,
        tags=_lookup(names, items, owner, n, _TAGS),
        keys=_split_keys(keys, n),
        uniq_key=_lookup(names, items, owner, n, _UNIQ_KEY),
    )


def _per_record_properties(values: Bytes, offsets: Int64Array) -> _Properties:
    """Properties decoded record by record with
    :func:`storage.record.properties.decode_properties`: for batches the vectorised split
    does not cover (a repeated name keeps its last value, bytes that are not UTF-8 are
    replaced)."""
    decoded = [
        decode_properties(values[start:end].tobytes())
        for start, end in itertools.pairwise(offsets.tolist())
    ]
    return _Properties(
        map=pa.array([list(p.items()) for p in decoded], type=PROPERTIES_TYPE),
        tags=pa.array([p.get(PROPERTY_TAGS) for p in decoded], type=pa.string()),
        keys=pa.array(
            [[k for k in p.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR) if k] for p in decoded],
            type=KEYS_TYPE,
        ),
        uniq_key=pa.array([p.get(PROPERTY_UNIQ_KEY) for p in decoded], type=pa.string()),
    )


def _properties(values: Bytes, offsets: Int64Array) -> _Properties:
    """Properties of n records, vectorised when the batch allows it."""
    try:
        return _parse_properties(values, offsets)
    except _NeedsSlowPath:
        return _per_record_properties(values, offsets)


def _topics(data: Bytes, topic_at: Int64Array, width: Int64Array) -> tuple[Any, Int64Array]:
    """Topic strings from each record's TOPIC LENGTH field (absolute positions), and where
    each record's PROPERTIES LENGTH field is."""
    topic_length = _topic_lengths(data, topic_at, width)
    start = topic_at + width
    values, offsets = gather_ranges(data, start, topic_length)
    return _string_array(values, offsets), start + topic_length


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
        if len(parsed.positions) == 0:
            return empty_batch()
    return _vector_batch(data, parsed, file_start, store_dir)


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
        head = _gather(data, positions, _HEAD_DTYPE.itemsize).view(_HEAD_DTYPE).reshape(-1)
        layout = _Layout.of_fields(head["sys_flag"], head["magic"])
        body_length = _big_endian(data, positions + layout.header - 4, ">i4")
        store_ms = _big_endian(data, positions + layout.store_timestamp_at, ">i8")
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
                _gather(data, at + layout.store_host_at[index], width),
                _gather(data, at + _PHYSICAL_OFFSET_AT, 8),
            ],
            axis=1,
        )
        parts.append(_hex_strings(raw))
        owners.append(index)
    if len(parts) == 1:
        return parts[0]
    order = np.argsort(np.concatenate(owners), kind="stable")
    return pa.concat_arrays(parts).take(pa.array(order))


def _vector_batch(data: Bytes, records: _Records, file_start: int, store_dir: str) -> Any:
    positions, head, layout = records.positions, records.head, records.layout
    body_values, body_offsets = gather_ranges(data, positions + layout.header, records.body_length)
    properties_length = _big_endian(data, records.properties_at, ">i2")
    raw_values, raw_offsets = gather_ranges(data, records.properties_at + 2, properties_length)
    properties = _properties(raw_values, raw_offsets)
    records.topics.validate(full=True)
    reconsume_times = _big_endian(data, positions + layout.reconsume_times_at, ">i4")
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
        _string_array(body_values, body_offsets, binary=True),
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
        "properties": list(message.properties.items()),
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

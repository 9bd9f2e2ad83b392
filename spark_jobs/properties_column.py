"""The properties of many records as Arrow columns: the map, and TAGS, KEYS and UNIQ_KEY.

:func:`properties_columns` splits every record's PROPERTIES text at once with numpy. A batch
that path does not cover (a property name repeated in one record, bytes that are not UTF-8)
is decoded record by record with :func:`storage.record.properties.decode_properties`, whose
result the vectorised split equals wherever it applies. Either way the map leaves out the
broker's bookkeeping, as every reader of the broker is shown a message
(:func:`storage.record.properties.shown_properties`).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from spark_jobs.arrays import Bytes, Int64Array, gather_ranges, offsets_of, string_array
from storage.record.properties import (
    BOOKKEEPING_PROPERTIES,
    KEY_SEPARATOR,
    NAME_VALUE_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    decode_properties,
    shown_properties,
    split_keys,
)

KEYS_TYPE: Final = pa.list_(pa.field("element", pa.string(), nullable=False))
PROPERTIES_TYPE: Final = pa.map_(
    pa.field("key", pa.string(), nullable=False), pa.field("value", pa.string(), nullable=False)
)
_NAME_VALUE_SEPARATOR: Final = ord(NAME_VALUE_SEPARATOR)
_PROPERTY_SEPARATOR: Final = ord(PROPERTY_SEPARATOR)
_TAGS: Final = PROPERTY_TAGS.encode()
_KEYS: Final = PROPERTY_KEYS.encode()
_UNIQ_KEY: Final = PROPERTY_UNIQ_KEY.encode()


@dataclass(frozen=True, slots=True)
class PropertiesColumns:
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
    parts = pc.split_pattern(keys, KEY_SEPARATOR)
    flat = parts.flatten()
    parents = np.asarray(pc.list_parent_indices(parts).to_numpy(zero_copy_only=False))
    lengths = np.asarray(pc.utf8_length(flat).to_numpy(zero_copy_only=False))
    kept = np.flatnonzero(lengths > 0)
    counts = np.bincount(parents[kept], minlength=n).astype(np.int64)
    return pa.ListArray.from_arrays(
        pa.array(offsets_of(counts).astype(np.int32)), flat.take(pa.array(kept)), type=KEYS_TYPE
    )


def _has_repeated_names(names: Any, owners: Int64Array) -> bool:
    """Whether some record has the same property name twice."""
    if len(owners) == 0:
        return False
    encoded = names.dictionary_encode()
    codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    keys = np.sort(owners * len(encoded.dictionary) + codes)
    return bool(np.any(keys[1:] == keys[:-1]))


@functools.cache
def _bookkeeping() -> Any:
    """The bookkeeping property names as an Arrow array, made on first use: building an array
    imports pandas, which a Spark driver planning reads has no other use for (a streaming
    query's source process would pay for it at every query start)."""
    return pa.array(sorted(BOOKKEEPING_PROPERTIES), pa.string())


def _without_bookkeeping(names: Any, items: Any, owners: Int64Array) -> tuple[Any, Any, Int64Array]:
    """The (name, value, record) entries but those of the broker's bookkeeping."""
    hidden = np.asarray(
        pc.is_in(names, value_set=_bookkeeping()).to_numpy(zero_copy_only=False), dtype=bool
    )
    if not hidden.any():
        return names, items, owners
    shown = np.flatnonzero(~hidden)
    return names.take(pa.array(shown)), items.take(pa.array(shown)), owners[shown]


def _parse_properties(values: Bytes, offsets: Int64Array) -> PropertiesColumns:
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
    names = string_array(name_bytes, name_offsets)
    items = string_array(value_bytes, value_offsets)
    try:
        names.validate(full=True)
        items.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise _NeedsSlowPath("properties are not valid UTF-8") from exc
    names, items, owner = _without_bookkeeping(names, items, owner)
    if _has_repeated_names(names, owner):
        raise _NeedsSlowPath("a property name repeats within a record")
    counts = np.bincount(owner, minlength=n).astype(np.int64)
    map_offsets = pa.array(offsets_of(counts).astype(np.int32))
    properties = pa.MapArray.from_arrays(map_offsets, names, items, type=PROPERTIES_TYPE)
    keys = _lookup(names, items, owner, n, _KEYS)
    return PropertiesColumns(
        map=properties,
        tags=_lookup(names, items, owner, n, _TAGS),
        keys=_split_keys(keys, n),
        uniq_key=_lookup(names, items, owner, n, _UNIQ_KEY),
    )


def _per_record_properties(values: Bytes, offsets: Int64Array) -> PropertiesColumns:
    """Properties decoded record by record with
    :func:`storage.record.properties.decode_properties` (and shown as
    :func:`~storage.record.properties.shown_properties` shows them): for batches the
    vectorised split does not cover (a repeated name keeps its last value, bytes that are
    not UTF-8 are replaced)."""
    decoded = [
        shown_properties(decode_properties(values[start:end].tobytes()))
        for start, end in itertools.pairwise(offsets.tolist())
    ]
    return PropertiesColumns(
        map=pa.array([list(p.items()) for p in decoded], type=PROPERTIES_TYPE),
        tags=pa.array([p.get(PROPERTY_TAGS) for p in decoded], type=pa.string()),
        keys=pa.array(
            [split_keys(p.get(PROPERTY_KEYS)) for p in decoded],
            type=KEYS_TYPE,
        ),
        uniq_key=pa.array([p.get(PROPERTY_UNIQ_KEY) for p in decoded], type=pa.string()),
    )


def properties_columns(values: Bytes, offsets: Int64Array) -> PropertiesColumns:
    """Properties of n records, vectorised when the batch allows it."""
    try:
        return _parse_properties(values, offsets)
    except _NeedsSlowPath:
        return _per_record_properties(values, offsets)

"""numpy and Arrow helpers of the record readers: gathering fields of many records at once
from a file's bytes, and building Arrow arrays over the gathered bytes without copies."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]

from storage.record.layout import Buffer

Int64Array = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]

_HEX: Final = np.frombuffer(
    b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint8
).reshape(256, 2)
_SLICE_COPY_MIN_AVERAGE: Final = 48  # bytes per item from which slice copies win


def as_bytes(buffer: Buffer) -> Bytes:
    """A zero-copy uint8 view of a buffer (mmap, bytes, bytearray)."""
    return np.frombuffer(buffer, dtype=np.uint8)


def gather(data: Bytes, starts: Int64Array, width: int) -> Bytes:
    """``width`` bytes at each start, as an (n, width) array; indexes past the end clip."""
    index = starts[:, None] + np.arange(width, dtype=np.int64)
    return np.take(data, index, mode="clip")


def big_endian(data: Bytes, starts: Int64Array, dtype: str) -> Int64Array:
    """The big-endian integers of ``dtype`` at each start, widened to int64."""
    width = np.dtype(dtype).itemsize
    values = gather(data, starts, width).view(dtype).reshape(-1)
    return values.astype(np.int64)


def offsets_of(lengths: Int64Array) -> Int64Array:
    """Arrow offsets (n + 1) of items with these lengths."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def gather_ranges(data: Bytes, starts: Int64Array, lengths: Int64Array) -> tuple[Bytes, Int64Array]:
    """Concatenate ``data[start:start + length]`` for every item; returns (values, offsets).

    Long items (bodies) are copied slice by slice; short ones (topics, property names and
    values) through one index array, which is cheaper when items are a few bytes.
    """
    offsets = offsets_of(lengths)
    total = int(offsets[-1])
    if total == 0:
        return np.empty(0, dtype=np.uint8), offsets
    if total >= _SLICE_COPY_MIN_AVERAGE * len(lengths):
        ends = (starts + lengths).tolist()
        values = np.concatenate([data[a:b] for a, b in zip(starts.tolist(), ends, strict=True)])
        return values, offsets
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
    return data[index], offsets


def string_array(values: Bytes, offsets: Int64Array, binary: bool = False) -> Any:
    """An Arrow string (or binary) array over concatenated values and int32 offsets."""
    kind = pa.binary() if binary else pa.string()
    return pa.Array.from_buffers(
        kind,
        len(offsets) - 1,
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(values)],
    )


def hex_strings(raw: Bytes) -> Any:
    """Upper-case hex strings of the rows of an (n, k) byte matrix."""
    rows, width = raw.shape
    text = np.ascontiguousarray(_HEX[raw].reshape(rows, width * 2))
    offsets = np.arange(0, rows * width * 2 + 1, width * 2, dtype=np.int64)
    return string_array(text.reshape(-1), offsets)

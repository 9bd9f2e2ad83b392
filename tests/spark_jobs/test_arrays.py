"""arrays: fields of many records gathered at once, and Arrow arrays over the bytes."""

from __future__ import annotations

import numpy as np
import pytest

from spark_jobs.arrays import (
    as_bytes,
    big_endian,
    gather,
    gather_ranges,
    hex_strings,
    offsets_of,
    string_array,
)

DATA = as_bytes(bytes(range(64)) + b"\xff\xff\xff\xfe")


def test_gather_and_big_endian_read_at_every_start() -> None:
    starts = np.array([0, 10, 64], dtype=np.int64)
    assert gather(DATA, starts, 2).tolist() == [[0, 1], [10, 11], [255, 255]]
    assert big_endian(DATA, starts, ">i2").tolist() == [1, 0x0A0B, -1]
    assert big_endian(DATA, np.array([64], dtype=np.int64), ">i4").tolist() == [-2]


@pytest.mark.parametrize("length", [1, 60], ids=["short-items-by-index", "long-items-by-slice"])
def test_gather_ranges_concatenates_items_and_gives_arrow_offsets(length: int) -> None:
    starts = np.array([0, 3, 4], dtype=np.int64)
    lengths = np.array([length, 0, length], dtype=np.int64)
    values, offsets = gather_ranges(DATA, starts, lengths)
    assert offsets.tolist() == offsets_of(lengths).tolist() == [0, length, length, 2 * length]
    assert values.tobytes() == bytes(DATA[0:length]) + bytes(DATA[4 : 4 + length])
    empty, none = gather_ranges(DATA, starts, np.zeros(3, dtype=np.int64))
    assert (len(empty), none.tolist()) == (0, [0, 0, 0, 0])


def test_string_arrays_and_hex_strings() -> None:
    values = as_bytes("abcdé".encode())
    offsets = np.array([0, 2, 2, 6], dtype=np.int64)
    assert string_array(values, offsets).to_pylist() == ["ab", "", "cdé"]
    assert string_array(values, offsets, binary=True).to_pylist() == [b"ab", b"", "cdé".encode()]
    raw = np.array([[0x7F, 0, 0, 1], [0xAB, 0xCD, 0xEF, 0x10]], dtype=np.uint8)
    assert hex_strings(raw).to_pylist() == ["7F000001", "ABCDEF10"]

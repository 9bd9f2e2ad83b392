"""ConsumeQueueFile: a file's end found in O(log n) reads near its data, units read in
order and backwards, all through the file descriptor."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from storage.consume_queue_file import ConsumeQueueFile, count_valid_units
from storage.record.layout import CQ_UNIT_SIZE, CQ_UNIT_STRUCT, PRE_BLANK_SIZE

UNITS = 300_000  # the default file


@pytest.mark.parametrize("valid", [0, 1, 2, 5, 1000, 299_999, 300_000])
def test_the_end_is_found_by_reads_near_the_data_only(valid: int) -> None:
    looked_at: list[int] = []

    def unit_at(index: int) -> tuple[int, int, int]:
        looked_at.append(index)
        return (index * 100, 100, 0) if index < valid else (0, 0, 0)

    assert count_valid_units(unit_at, UNITS) == valid
    assert max(looked_at) <= max(2 * valid, 1)
    assert len(looked_at) <= 2 * math.log2(valid + 2) + 2


def write_file(path: Path, units: list[tuple[int, int, int]], size: int) -> None:
    data = b"".join(CQ_UNIT_STRUCT.pack(*unit) for unit in units)
    path.write_bytes(data + bytes(size - len(data)))


def test_a_real_file_is_read_without_mapping_it(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000"
    fillers = [(0, PRE_BLANK_SIZE, 0)] * 300
    real = [(1000 + n * 50, 50, n) for n in range(400)]
    write_file(path, fillers + real, 1000 * CQ_UNIT_SIZE)
    with ConsumeQueueFile(path, 1000 * CQ_UNIT_SIZE) as file:
        assert file.count_valid_units() == 700
        assert file.unit_at(300) == (1000, 50, 0)
        assert file.unit_at(5000) == (0, 0, 0), "past the end reads as no unit"
        assert list(file.units(299 * CQ_UNIT_SIZE, 302 * CQ_UNIT_SIZE)) == [
            fillers[0],
            real[0],
            real[1],
        ]
        assert list(file.units(0, 700 * CQ_UNIT_SIZE)) == fillers + real
        assert file.last_physical_end(700 * CQ_UNIT_SIZE) == 1000 + 399 * 50 + 50
        assert file.last_physical_end(300 * CQ_UNIT_SIZE) is None, "only fillers before it"
        assert file.last_physical_end(0) is None

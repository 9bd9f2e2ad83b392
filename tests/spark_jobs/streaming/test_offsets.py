"""Offsets JSON, the admission limit and the ranges a micro-batch reads."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.streaming.offsets import (
    QueueRange,
    cap,
    from_json,
    pack_ranges,
    plan_ranges,
    to_json,
)


def test_offsets_json_is_the_same_string_for_the_same_positions() -> None:
    positions = {("Paid", 10): 5, ("Orders", 2): 7, ("Paid", 2): 1, ("Orders", 0): 3}
    reordered = dict(reversed(list(positions.items())))
    assert json.dumps(to_json(positions)) == json.dumps(to_json(reordered))
    assert to_json(positions) == {"Orders": {"0": 3, "2": 7}, "Paid": {"2": 1, "10": 5}}
    assert list(to_json(positions)["Paid"]) == ["2", "10"]  # numeric order
    assert from_json(to_json(positions)) == positions
    for bad in ({"A": 1}, {"A": {"x": 1}}, {"A": {"0": -1}}, {"A": {"0": "1"}}):
        with pytest.raises(ValueError):
            from_json(bad)


def test_the_limit_is_shared_in_proportion_and_never_exceeded() -> None:
    begin = {("T", 0): 0, ("T", 1): 10, ("T", 2): 5}
    latest = {("T", 0): 100, ("T", 1): 10, ("T", 2): 55}  # 100, 0 and 50 waiting
    end = cap(begin, latest, 30)
    assert end == {("T", 0): 20, ("T", 1): 10, ("T", 2): 15}
    assert cap(begin, latest, 1000) == latest
    one = cap(begin, latest, 1)  # the largest share gets the single offset
    assert sum(one[q] - begin[q] for q in begin) == 1


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 500)), min_size=1, max_size=12),
    st.integers(1, 400),
)
def test_cap_reads_exactly_min_of_limit_and_waiting(
    queues: list[tuple[int, int]], limit: int
) -> None:
    begin = {("T", i): start for i, (start, _) in enumerate(queues)}
    latest = {("T", i): start + more for i, (start, more) in enumerate(queues)}
    end = cap(begin, latest, limit)
    taken = [end[q] - begin[q] for q in begin]
    assert all(0 <= n <= latest[q] - begin[q] for n, q in zip(taken, begin, strict=True))
    assert sum(taken) == min(limit, sum(latest[q] - begin[q] for q in begin))


def test_ranges_cover_each_queue_once_cut_to_size_and_to_min_partitions() -> None:
    begin = {("T", 0): 0, ("T", 1): 100, ("T", 2): 7}
    end = {("T", 0): 25, ("T", 1): 100, ("T", 2): 9, ("U", 0): 4}  # U/0 has no start here
    groups = {("T", 0): "g1"}
    ranges = plan_ranges(begin, end, groups, max_per_partition=10)
    assert ranges == [
        QueueRange("T", 0, 0, 9, "g1"),
        QueueRange("T", 0, 9, 17, "g1"),
        QueueRange("T", 0, 17, 25, "g1"),
        QueueRange("T", 2, 7, 9),
    ]
    more = plan_ranges({("T", 0): 0}, {("T", 0): 10}, {}, 100, min_partitions=4)
    assert [(r.start, r.end) for r in more] == [(0, 3), (3, 5), (5, 8), (8, 10)]
    assert plan_ranges({("T", 0): 5}, {("T", 0): 5}, {}, 10, min_partitions=3) == []


def test_ranges_are_packed_in_order_into_partitions_of_about_the_byte_budget() -> None:
    ranges = [QueueRange("T", q, 0, 10) for q in range(6)]
    assert pack_ranges(ranges, [10.0] * 6, 1000) == [tuple(ranges)]
    halves = pack_ranges(ranges, [10.0] * 6, 30)
    assert halves == [tuple(ranges[:3]), tuple(ranges[3:])]
    assert len(pack_ranges(ranges, [10.0] * 6, 1000, min_partitions=3)) == 3
    assert len(pack_ranges(ranges, [10.0] * 6, 1, min_partitions=2)) == 6  # one range each
    uneven = pack_ranges(ranges, [100.0, 1, 1, 1, 1, 100.0], 110)
    assert [[r.queue_id for r in part] for part in uneven] == [[0, 1, 2], [3, 4, 5]]
    assert pack_ranges([], [], 10) == []

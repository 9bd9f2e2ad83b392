"""A source's offsets: their JSON, the admission limit, and the ranges a micro-batch reads.

Positions map (topic, queue id) to the next offset to read. In Spark's checkpoint they are
the JSON ``{"Orders": {"0": 17, "1": 42}}`` -- Kafka's shape -- built with topics sorted and
queue ids in numeric order, so the same positions always give the same string. Nothing here
does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Positions = dict[tuple[str, int], int]


def to_json(positions: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """The checkpoint form: topics sorted, queue ids as strings in numeric order."""
    out: dict[str, dict[str, int]] = {}
    for topic, queue_id in sorted(positions):
        out.setdefault(topic, {})[str(queue_id)] = positions[(topic, queue_id)]
    return out


def from_json(offsets: Mapping[str, Any]) -> Positions:
    """Positions from the checkpoint form; ValueError when it is not one."""
    positions: Positions = {}
    for topic, queues in offsets.items():
        if not isinstance(queues, Mapping):
            raise ValueError(f"offsets of topic {topic!r} are not an object: {queues!r}")
        for queue, offset in queues.items():
            if not str(queue).isdigit() or not isinstance(offset, int) or offset < 0:
                raise ValueError(f"bad offset {topic}/{queue}: {offset!r}")
            positions[(str(topic), int(queue))] = offset
    return positions


def cap(begin: Mapping[tuple[str, int], int], latest: Positions, max_rows: int) -> Positions:
    """The end of a micro-batch that reads at most ``max_rows`` offsets in all.

    Each queue gets a share of the limit in proportion to what it has waiting, rounded down;
    the offsets left over go one each to the queues with the largest remainders (ties: queue
    order), so the total is exactly min(max_rows, waiting) and every queue with data moves
    along over successive batches.
    """
    waiting = {q: max(0, latest[q] - begin.get(q, latest[q])) for q in latest}
    total = sum(waiting.values())
    if total <= max_rows:
        return dict(latest)
    shares = {q: max_rows * n / total for q, n in waiting.items()}
    taken = {q: math.floor(s) for q, s in shares.items()}
    left = max_rows - sum(taken.values())
    by_remainder = sorted(waiting, key=lambda q: (-(shares[q] - taken[q]), q))
    for queue in by_remainder[:left]:
        taken[queue] += 1
    return {q: begin.get(q, latest[q]) + taken[q] if waiting[q] else latest[q] for q in latest}


@dataclass(frozen=True, slots=True)
class QueueRange:
    """Offsets [start, end) of one queue: what one Spark partition reads."""

    topic: str
    queue_id: int
    start: int
    end: int
    broker_group: str | None = None

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    begin: Mapping[tuple[str, int], int],
    end: Mapping[tuple[str, int], int],
    groups: Mapping[tuple[str, int], str | None],
    max_per_partition: int,
    min_partitions: int = 1,
    byte_limits: Mapping[tuple[str, int], int] | None = None,
) -> list[QueueRange]:
    """One range per queue that moved, cut into pieces of at most ``max_per_partition``
    offsets (and of a queue's ``byte_limits`` entry: the offsets its byte budget holds), and
    further (largest first) until there are ``min_partitions``; in queue order, so the same
    offsets always give the same partitions."""
    ranges: list[QueueRange] = []
    for key in sorted(end):
        start, stop = begin.get(key, end[key]), end[key]
        if stop <= start:
            continue
        most = max_per_partition
        if byte_limits is not None and key in byte_limits:
            most = max(1, min(most, byte_limits[key]))
        pieces = math.ceil((stop - start) / most)
        ranges.extend(_split(QueueRange(key[0], key[1], start, stop, groups.get(key)), pieces))
    while 0 < len(ranges) < min_partitions:
        largest = max(ranges, key=lambda r: (r.size, -ranges.index(r)))
        if largest.size < 2:
            break
        at = ranges.index(largest)
        ranges[at : at + 1] = _split(largest, 2)
    return ranges


def pack_ranges(
    ranges: Sequence[QueueRange], sizes: Sequence[float], budget: int, min_partitions: int = 1
) -> list[tuple[QueueRange, ...]]:
    """The ranges, in order, gathered into partitions of about ``budget`` bytes (``sizes``:
    each range's estimated bytes) and at least ``min_partitions`` of them where there are
    that many ranges: a task costs Spark more than reading a small range does."""
    total = sum(sizes)
    count = min(len(ranges), max(min_partitions, math.ceil(total / max(1, budget))))
    if count <= 1:
        return [tuple(ranges)] if ranges else []
    share = total / count
    packed: list[list[QueueRange]] = [[] for _ in range(count)]
    before = 0.0
    for queue_range, size in zip(ranges, sizes, strict=True):
        middle = before + size / 2  # a range goes where most of it falls
        packed[min(count - 1, int(middle // share))].append(queue_range)
        before += size
    return [tuple(part) for part in packed if part]


def _split(whole: QueueRange, pieces: int) -> list[QueueRange]:
    step, extra = divmod(whole.size, pieces)
    out = []
    start = whole.start
    for index in range(pieces):
        stop = start + step + (1 if index < extra else 0)
        out.append(QueueRange(whole.topic, whole.queue_id, start, stop, whole.broker_group))
        start = stop
    return out

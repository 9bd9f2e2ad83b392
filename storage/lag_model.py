"""Consumer lag of one queue: the one definition the offsets service, the admin pages and the
Spark lag report share.

* The group's *position* is its committed offset (the next offset it consumes); a group that
  never committed the queue (``NOT_COMMITTED``) is placed at the queue's min offset.
* Lag in messages = max offset - position, floored at 0 (a position past the max, after a
  store was cut back, is no lag). A committed offset below the min offset still counts the
  expired messages in between, as RocketMQ's consume stats do (``brokerOffset -
  consumerOffset``): they were never consumed, and the gap shows the data loss.
* Lag in seconds = ``now`` - store time of the oldest unconsumed message still stored: the
  one at ``max(position, min offset)``. 0 when nothing waits; None when that message's store
  time cannot be read (a file went away meanwhile).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

NOT_COMMITTED: Final = -1
"""The committed offset of a queue the group never committed."""

StoreTimeAt = Callable[[int], int | None]
"""The store time (ms) of the message at a queue offset, or None when it cannot be read."""


@dataclass(frozen=True, slots=True)
class LagFigures:
    """How far one group is behind on one queue."""

    lag: int  # messages
    lag_seconds: float | None  # age of the oldest unconsumed message; None when unknown
    oldest_unconsumed_ms: int | None  # its store time; None when none waits or unknown


def consume_position(committed_offset: int, min_offset: int) -> int:
    """Where the group consumes from: its committed offset, else the queue's min offset."""
    return min_offset if committed_offset < 0 else committed_offset


def lag_in_messages(committed_offset: int, min_offset: int, max_offset: int) -> int:
    """Max offset - position, floored at 0."""
    return max(0, max_offset - consume_position(committed_offset, min_offset))


def oldest_unconsumed_offset(committed_offset: int, min_offset: int, max_offset: int) -> int | None:
    """The queue offset of the oldest message still stored that the group has not consumed
    (None when nothing waits)."""
    if lag_in_messages(committed_offset, min_offset, max_offset) == 0:
        return None
    return max(consume_position(committed_offset, min_offset), min_offset)


def age_seconds(stored_at_ms: int, now_ms: int) -> float:
    """Seconds from a store time to ``now_ms``, floored at 0 (clocks may step back)."""
    return max(0.0, (now_ms - stored_at_ms) / 1000)


def queue_lag_figures(
    committed_offset: int,
    min_offset: int,
    max_offset: int,
    store_time_at: StoreTimeAt,
    now_ms: int,
) -> LagFigures:
    """Lag in messages and in seconds of one queue; ``store_time_at`` reads a store time and
    is called at most once."""
    lag = lag_in_messages(committed_offset, min_offset, max_offset)
    oldest = oldest_unconsumed_offset(committed_offset, min_offset, max_offset)
    if oldest is None:
        return LagFigures(lag, 0.0, None)
    stored_at = store_time_at(oldest)
    if stored_at is None:
        return LagFigures(lag, None, None)
    return LagFigures(lag, age_seconds(stored_at, now_ms), stored_at)


@dataclass(frozen=True, slots=True)
class DlqDepth:
    """A group's dead-letter queue: what is stored, and how much of it still waits.

    A redrive moves the group's offset on its ``%DLQ%<group>`` queue past the dead letters it
    redrove (the *redrive watermark*: the oldest dead letter not redriven yet), so waiting is
    the queue's lag from that offset, as for any queue; the redriven ones stay stored until the
    files expire. A dead letter redriven while an older one still waits counts as waiting
    until the older one goes too.
    """

    stored: int
    waiting: int

    @property
    def redriven(self) -> int:
        return self.stored - self.waiting


def dlq_depth(committed_offset: int, min_offset: int, max_offset: int) -> DlqDepth:
    """The depth of a DLQ queue given the group's offset on it (:data:`NOT_COMMITTED` when no
    redrive ever moved it)."""
    stored = max(0, max_offset - min_offset)
    waiting = min(stored, lag_in_messages(committed_offset, min_offset, max_offset))
    return DlqDepth(stored, waiting)

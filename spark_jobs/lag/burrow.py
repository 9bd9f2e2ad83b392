"""LinkedIn Burrow's rules over a window of a queue's last snapshots: statuses, rates, drain time.

A window is a queue's last N snapshot entries, oldest first (see :func:`evaluate_window`). A
group's status is its worst queue's. The consume and produce rates come from the first and
last entry of the window, and give the time to drain.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final

DEFAULT_WINDOW: Final = 10


class Status(Enum):
    """Burrow's statuses, in increasing severity (NOTFOUND: a group with no queues)."""

    NOTFOUND = "NOTFOUND"
    OK = "OK"
    WARN = "WARN"
    STOP = "STOP"
    STALL = "STALL"
    REWIND = "REWIND"

    @property
    def severity(self) -> int:
        """Burrow's order: OK < WARN < STOP < STALL < REWIND."""
        return _SEVERITY[self]

    @property
    def is_error(self) -> bool:
        """STOP, STALL and REWIND are errors; WARN is a warning."""
        return self.severity >= _SEVERITY[Status.STOP]


_SEVERITY: Final = {
    Status.NOTFOUND: 0,
    Status.OK: 1,
    Status.WARN: 2,
    Status.STOP: 4,
    Status.STALL: 5,
    Status.REWIND: 6,
}


@dataclass(frozen=True, slots=True)
class WindowEntry:
    """What a snapshot recorded about one queue: the history row the rules read."""

    snapshot_ms: int
    position: int
    lag: int
    max_offset: int
    last_commit_ms: int | None = None


def commit_stamps(entries: Sequence[WindowEntry]) -> list[int]:
    """The commit time of each entry: the recorded last commit time when known; otherwise
    the snapshot at which the position last moved (a commit happened since the one before)."""
    stamps: list[int] = []
    for index, entry in enumerate(entries):
        if entry.last_commit_ms is not None:
            stamps.append(entry.last_commit_ms)
        elif index > 0 and entry.position == entries[index - 1].position:
            stamps.append(stamps[-1])
        else:
            stamps.append(entry.snapshot_ms)
    return stamps


def evaluate_window(entries: Sequence[WindowEntry], now_ms: int) -> Status:
    """Burrow's status of one queue over its window (oldest entry first).

    OK when the current lag is 0 or the lag was 0 anywhere in the window, and when the window
    holds fewer than two entries (no evidence yet). Otherwise, in order:

    1. REWIND: the committed offset went backwards between two entries;
    2. STOP: the time since the last commit exceeds the time the window's commits span;
    3. STALL: the offset never changed across the window (while commits kept arriving);
    4. WARN: the lag never decreased across the window;
    5. OK.
    """
    if len(entries) < 2:
        return Status.OK
    if entries[-1].lag <= 0 or any(entry.lag == 0 for entry in entries):
        return Status.OK
    pairs = list(itertools.pairwise(entries))
    if any(later.position < earlier.position for earlier, later in pairs):
        return Status.REWIND
    stamps = commit_stamps(entries)
    if now_ms - stamps[-1] > stamps[-1] - stamps[0]:
        return Status.STOP
    if all(entry.position == entries[0].position for entry in entries):
        return Status.STALL
    if all(later.lag >= earlier.lag for earlier, later in pairs):
        return Status.WARN
    return Status.OK


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status (NOTFOUND for none)."""
    return max(statuses, key=lambda s: s.severity, default=Status.NOTFOUND)


@dataclass(frozen=True, slots=True)
class Rates:
    """Consume and produce rates over a window, in messages per second (None: not known)."""

    consume: float | None
    produce: float | None


def window_rates(entries: Sequence[WindowEntry]) -> Rates:
    """Rates between the window's first and last entry (None with fewer than two)."""
    if len(entries) < 2:
        return Rates(None, None)
    first, last = entries[0], entries[-1]
    seconds = (last.snapshot_ms - first.snapshot_ms) / 1000
    if seconds <= 0:
        return Rates(None, None)
    consumed = max(0, last.position - first.position)
    produced = max(0, last.max_offset - first.max_offset)
    return Rates(consumed / seconds, produced / seconds)


def time_to_drain(lag: int, rates: Rates) -> float | None:
    """Seconds until the lag reaches 0 at the current rates; None when it does not shrink
    (or the rates are unknown); 0 when there is no lag."""
    if lag <= 0:
        return 0.0
    if rates.consume is None or rates.produce is None:
        return None
    net = rates.consume - rates.produce
    return lag / net if net > 0 else None

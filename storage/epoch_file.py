"""EpochFile: the (epoch, start offset) entries of one replica, in ``<store>/epoch.json``.

Each master starts a new epoch at its CommitLog max offset (RocketMQ 5's EpochFileCache).
A replica that (re)joins compares its entries with the master's to find the last offset
both logs agree on (:func:`consistent_offset`) and truncates everything after it.

Written with the crash-safe JSON helpers; the file holds ``{"epochs": [{"epoch": 1,
"startOffset": 0}, ...]}``, epochs strictly increasing, start offsets non-decreasing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from storage.json_file import as_int, as_object, load_json, save_json

EPOCH_FILE: Final = "epoch.json"


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """One epoch of the log: it starts at ``start_offset``; the next entry ends it."""

    epoch: int
    start_offset: int


class EpochFile:
    """The epoch entries of one store directory."""

    def __init__(self, root: Path) -> None:
        self.path = root / EPOCH_FILE
        self._lock = threading.Lock()
        self._entries: tuple[EpochEntry, ...] = ()

    def load(self) -> EpochFile:
        """Read the file (or its backup); no file means no epochs yet."""
        self._entries = tuple(decode_entries(load_json(self.path)))
        return self

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return self._entries

    @property
    def last_epoch(self) -> int:
        """The newest epoch; 0 before the first."""
        return self._entries[-1].epoch if self._entries else 0

    def begin(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` (a new master's max offset)."""
        with self._lock:
            last = self._entries[-1] if self._entries else None
            if last is not None and epoch <= last.epoch:
                raise ValueError(f"epoch {epoch} is not after the last epoch {last.epoch}")
            if last is not None and start_offset < last.start_offset:
                raise ValueError(
                    f"epoch {epoch} cannot start at {start_offset}, before epoch "
                    f"{last.epoch} (at {last.start_offset})"
                )
            self._save((*self._entries, EpochEntry(epoch, start_offset)))

    def replace(self, entries: Sequence[EpochEntry]) -> None:
        """Take a master's entries as this replica's (its log now follows that master)."""
        with self._lock:
            if tuple(entries) != self._entries:
                self._save(tuple(entries))

    def truncate(self, offset: int) -> None:
        """Forget epochs that start after ``offset`` (the log was cut there)."""
        with self._lock:
            kept = tuple(e for e in self._entries if e.start_offset <= offset)
            if kept != self._entries:
                self._save(kept)

    def _save(self, entries: tuple[EpochEntry, ...]) -> None:
        save_json(self.path, encode_entries(entries))
        self._entries = entries


def encode_entries(entries: Sequence[EpochEntry]) -> dict[str, object]:
    return {"epochs": [{"epoch": e.epoch, "startOffset": e.start_offset} for e in entries]}


def decode_entries(root: object) -> list[EpochEntry]:
    """Entries of an ``epoch.json`` object (None: none); ValueError on a wrong shape."""
    if root is None:
        return []
    items = as_object(root, "epoch file").get("epochs", [])
    if not isinstance(items, list):
        raise ValueError("epoch file: 'epochs' must be a list")
    entries = []
    for item in items:
        entry = as_object(item, "epoch entry")
        entries.append(
            EpochEntry(
                as_int(entry.get("epoch"), "epoch"), as_int(entry.get("startOffset"), "startOffset")
            )
        )
    return entries


def consistent_offset(
    local: Sequence[EpochEntry], remote: Sequence[EpochEntry], local_max: int
) -> int:
    """The offset up to which a replica's log agrees with the master's (findConsistentPoint).

    Walk the local epochs from the newest; the first one the master has too (same epoch,
    same start) is the last common epoch, and the logs agree up to the smaller of its two
    ends: the next entry's start on each side, the replica's max offset for its last entry
    (the master's last epoch is still open). -1 when no epoch is common.
    """
    remote_ends = _ends(remote, None)
    local_ends = _ends(local, local_max)
    for index in range(len(local) - 1, -1, -1):
        entry = local[index]
        if entry not in remote_ends:
            continue
        local_end = local_ends[entry]
        remote_end = remote_ends[entry]
        assert local_end is not None
        return local_end if remote_end is None else min(local_end, remote_end)
    return -1


def _ends(entries: Sequence[EpochEntry], last_end: int | None) -> dict[EpochEntry, int | None]:
    ends: dict[EpochEntry, int | None] = {}
    for index, entry in enumerate(entries):
        following = entries[index + 1] if index + 1 < len(entries) else None
        ends[entry] = following.start_offset if following is not None else last_end
    return ends

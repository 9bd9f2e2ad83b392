"""``config/popState.json``: where a restart resumes reading the revive topic.

One snapshot, written atomically (the crash-safe JSON writer): the revive-queue offset before
which every CK is done, and each queue's lowest offset not done at that same instant. Both come
from one moment of the in-memory table, so they agree: every CK after the offset is read again
on restart, and everything below each committed offset was acked or redelivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from services.pop.inflight import QueueKey
from storage.json_file import load_json, save_json

POP_STATE_FILE: Final = "popState.json"
"""The snapshot's name in ``<store>/config/``. Offline lag reports read its ``inFlight``
counts too (``spark_jobs.lag.pop_state``, which keeps its own copy of the name: a test
writes this file with :func:`save_snapshot` and reads it back there)."""


@dataclass(frozen=True, slots=True)
class PopSnapshot:
    revive_offset: int = 0
    committed: dict[QueueKey, int] = field(default_factory=dict)
    # Messages in flight per queue at that instant: for offline readers (lag reports); a
    # restart recounts them from the revive topic.
    in_flight: dict[QueueKey, int] = field(default_factory=dict)


def load_snapshot(config_dir: Path) -> PopSnapshot:
    """The last snapshot, or an empty one (read the revive topic from its start)."""
    root = load_json(config_dir / POP_STATE_FILE)
    if not isinstance(root, dict):
        return PopSnapshot()
    committed: dict[QueueKey, int] = {}
    for item in root.get("queues", []):
        try:
            key = (str(item["group"]), str(item["topic"]), int(item["queue_id"]))
            committed[key] = int(item["offset"])
        except (KeyError, TypeError, ValueError):
            continue
    return PopSnapshot(int(root.get("reviveOffset", 0)), committed)


def save_snapshot(config_dir: Path, snapshot: PopSnapshot) -> None:
    save_json(
        config_dir / POP_STATE_FILE,
        {
            "reviveOffset": snapshot.revive_offset,
            "queues": [
                {
                    "group": g,
                    "topic": t,
                    "queue_id": q,
                    "offset": o,
                    "inFlight": snapshot.in_flight.get((g, t, q), 0),
                }
                for (g, t, q), o in sorted(snapshot.committed.items())
            ],
        },
    )

"""POP groups' messages in flight, from the broker's POP snapshot in ``<store>/config/``.

The broker's POP service writes the snapshot (its format and name belong to the services
layer, which this package may not import); a lag report reads one part of it: each queue's
messages received and not acked yet. The name below is that file's, and a test writes the
file with the broker's own writer and reads it back here, so neither side can drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from storage.store_reader import read_config

POP_STATE_FILE: Final = "popState.json"


def read_pop_in_flight(store_dir: Path) -> dict[tuple[str, str, int], int]:
    """Messages received and not yet acked, by (group, topic, queue id), as of the POP
    service's last snapshot; empty when no group consumes by POP."""
    root = read_config(store_dir, POP_STATE_FILE)
    queues = root.get("queues") if isinstance(root, dict) else None
    found: dict[tuple[str, str, int], int] = {}
    for item in queues if isinstance(queues, list) else []:
        try:
            key = (str(item["group"]), str(item["topic"]), int(item["queue_id"]))
            in_flight = int(item.get("inFlight", 0))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        if in_flight > 0:
            found[key] = in_flight
    return found

"""Points in time as people and programs write them: epoch milliseconds or ISO 8601.

One parser for every place that takes a time (HTTP parameters and bodies, the Spark jobs'
options), so ``?timestamp=`` and ``--from-time`` read the same text the same way.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_EPOCH_MS = re.compile(r"[+-]?[0-9]+")


def parse_timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch from ``1714557600000``, ``2024-05-01`` or an ISO 8601
    datetime (``2024-05-01T12:00:00Z``, ``2024-05-01T14:00:00+02:00``); a datetime without a
    zone is UTC. ValueError, saying what is accepted, for anything else (spaces included)."""
    if _EPOCH_MS.fullmatch(text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"cannot read {text!r} as a time: use epoch milliseconds or ISO 8601, "
            "e.g. 2024-05-01T12:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)

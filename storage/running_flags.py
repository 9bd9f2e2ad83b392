"""RunningFlags: whether the store accepts writes, and every reason why not.

Shared by the put path, the dispatcher (a ConsumeQueue or index file that cannot be written),
the disk watch (a full disk) and the flushers (a failed fsync), so none of them needs the whole
store. Each cause is a :class:`Refusal` kind that its owner sets and clears on its own: space
coming back clears a full disk but not a failed fsync. Reads keep working while the store is
not writeable.

The disk watch and the flushers change the flags from their threads; the owner thread reads
``writeable`` (one attribute) on every put.
"""

from __future__ import annotations

import threading
from enum import Enum
from typing import Final

DISK_FULL_REASON: Final = "disk full"


class Refusal(Enum):
    """Why the store refuses writes, most lasting first (the first one is reported first)."""

    FLUSH_FAILED = "flush failed"  # fsync failed: only a restart clears it
    WRITE_FAILED = "write failed"  # a CommitLog write failed for another reason than space
    DISPATCH = "dispatch"  # dispatch cannot advance; cleared once it caught up
    DISK_FULL = "disk full"  # over the warning ratio, or ENOSPC; cleared once space is back


class RunningFlags:
    """The store's writeable state (RocketMQ's ``RunningFlags``, with a reason per cause)."""

    __slots__ = ("_lock", "_reasons", "not_writeable_reason", "writeable")

    def __init__(self) -> None:
        self.writeable = True
        self.not_writeable_reason = ""
        self._reasons: dict[Refusal, str] = {}
        self._lock = threading.Lock()

    def refuse(self, kind: Refusal, reason: str) -> None:
        """Refuse writes for ``kind`` (replacing that kind's earlier reason)."""
        with self._lock:
            self._reasons[kind] = reason
            self._update()

    def clear(self, kind: Refusal) -> None:
        """``kind`` no longer stands in the way of writes."""
        with self._lock:
            if self._reasons.pop(kind, None) is not None:
                self._update()

    @property
    def first_refusal(self) -> Refusal | None:
        """The most lasting cause that stands now; None while writeable."""
        reasons = self._reasons
        return next((kind for kind in Refusal if kind in reasons), None)

    def mark_not_writeable(self, reason: str) -> None:
        """Refuse writes for a failed write: a full disk when ``reason`` says so."""
        full = reason.startswith(DISK_FULL_REASON)
        self.refuse(Refusal.DISK_FULL if full else Refusal.WRITE_FAILED, reason)

    def mark_writeable(self) -> None:
        """Clear every cause but a failed fsync (the page cache can no longer be trusted)."""
        with self._lock:
            for kind in list(self._reasons):
                if kind is not Refusal.FLUSH_FAILED:
                    del self._reasons[kind]
            self._update()

    @property
    def disk_full(self) -> bool:
        """Not writeable because the disk is (or was) full."""
        return Refusal.DISK_FULL in self._reasons

    @property
    def flush_failed(self) -> bool:
        """An fsync failed: nothing more may be acknowledged until a restart."""
        return Refusal.FLUSH_FAILED in self._reasons

    def _update(self) -> None:
        reasons = self._reasons
        self.not_writeable_reason = "; ".join(reasons[kind] for kind in Refusal if kind in reasons)
        self.writeable = not reasons

"""RunningFlags: whether the store accepts writes, and why not.

Shared by the put path, the dispatcher (a ConsumeQueue file that cannot be written) and the
cleaner (a full disk), so none of them needs the whole store. Reads keep working while the
store is not writeable.
"""

from __future__ import annotations

from typing import Final

DISK_FULL_REASON: Final = "disk full"


class RunningFlags:
    """The store's writeable state (RocketMQ's ``RunningFlags``, reduced to one flag)."""

    __slots__ = ("not_writeable_reason", "writeable")

    def __init__(self) -> None:
        self.writeable = True
        self.not_writeable_reason = ""

    def mark_not_writeable(self, reason: str) -> None:
        self.writeable = False
        self.not_writeable_reason = reason

    def mark_writeable(self) -> None:
        self.writeable = True
        self.not_writeable_reason = ""

    @property
    def disk_full(self) -> bool:
        """Not writeable because the disk is (or was) full."""
        return not self.writeable and self.not_writeable_reason.startswith(DISK_FULL_REASON)

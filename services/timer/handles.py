"""Timer cancel handles (RocketMQ 5.3's ``RecallMessageHandle``).

A handle is base64url (no padding) of ``"v2 <topic> <brokerGroup> <deliverMs> <uniqKey>"``,
where ``deliverMs`` is ``TIMER_OUT_MS + 1`` (it undoes the rounding down: a cancel marker
sent for that time lands in the same slot). It names the broker *group*, not the broker, so
it stays valid when a slave of the group becomes its master; the proxy routes a cancel by it.

Handles issued before (``"v1 <topic> <brokerName> ..."``, RocketMQ's text, naming the broker)
are still read: the group's master honours one when it holds the message it names.

Nothing in a handle is secret: it names a message, and cancelling needs write access to the
topic.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, NamedTuple

from services.errors import InvalidTimerHandleError

VERSION: Final = "v2"
"""Handles name the broker group."""
VERSION_BY_BROKER: Final = "v1"
"""Handles that name the broker that stored the message (read, no longer issued)."""


class TimerHandle(NamedTuple):
    topic: str
    issuer: str  # the broker group (v2), or the broker (v1)
    deliver_ms: int
    uniq_key: str
    version: str = VERSION

    @property
    def fire_ms(self) -> int:
        """The message's ``TIMER_OUT_MS``."""
        return self.deliver_ms - 1

    @property
    def names_group(self) -> bool:
        """Whether ``issuer`` is a broker group (else a broker's name)."""
        return self.version == VERSION

    def encode(self) -> str:
        text = f"{self.version} {self.topic} {self.issuer} {self.deliver_ms} {self.uniq_key}"
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_handle(handle: str) -> TimerHandle:
    """The parts of a handle; InvalidTimerHandleError when it is not one."""
    try:
        padded = handle + "=" * (-len(handle) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode()
    except (ValueError, binascii.Error, UnicodeError):
        raise InvalidTimerHandleError("the timer handle is not valid base64url") from None
    parts = text.split(" ")
    if (
        len(parts) != 5
        or parts[0] not in (VERSION, VERSION_BY_BROKER)
        or not parts[3].isdigit()
        or not all(parts)
    ):
        raise InvalidTimerHandleError("the timer handle is not one this broker issues")
    return TimerHandle(parts[1], parts[2], int(parts[3]), parts[4], parts[0])

"""Timer cancel handles (RocketMQ 5.3's ``RecallMessageHandle``).

A handle is base64url (no padding) of ``"v1 <topic> <brokerName> <deliverMs> <uniqKey>"``,
where ``deliverMs`` is ``TIMER_OUT_MS + 1`` (it undoes the rounding down: a cancel marker
sent for that time lands in the same slot). Nothing in it is secret: it names a message, and
cancelling needs write access to the topic.
"""

from __future__ import annotations

import base64
import binascii
from typing import NamedTuple

from services.errors import InvalidTimerHandleError

_VERSION = "v1"


class TimerHandle(NamedTuple):
    topic: str
    broker_name: str
    deliver_ms: int
    uniq_key: str

    @property
    def fire_ms(self) -> int:
        """The message's ``TIMER_OUT_MS``."""
        return self.deliver_ms - 1

    def encode(self) -> str:
        text = f"{_VERSION} {self.topic} {self.broker_name} {self.deliver_ms} {self.uniq_key}"
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_handle(handle: str) -> TimerHandle:
    """The parts of a handle; InvalidTimerHandleError when it is not one."""
    try:
        padded = handle + "=" * (-len(handle) % 4)
        text = base64.urlsafe_b64decode(padded.encode("ascii")).decode()
    except (ValueError, binascii.Error, UnicodeError):
        raise InvalidTimerHandleError("the timer handle is not valid base64url") from None
    parts = text.split(" ")
    if len(parts) != 5 or parts[0] != _VERSION or not parts[3].isdigit() or not all(parts):
        raise InvalidTimerHandleError("the timer handle is not one this broker issues")
    return TimerHandle(parts[1], parts[2], int(parts[3]), parts[4])

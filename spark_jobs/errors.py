"""What can go wrong between a Spark job and spoolmq's HTTP API.

::

    SpoolmqError
     ├── BrokerRefusedError                 a 4xx that a retry will not change
     │    ├── AuthenticationError           401: no token, or one the broker does not know
     │    ├── PermissionDeniedError         403: the token may not do this
     │    ├── UnknownTopicError             404: the topic does not exist
     │    └── IdempotencyKeyReusedError     422: a key was sent earlier with other rows
     ├── BrokerUnavailableError             no answer (or a retried status) after every retry
     │    └── OutcomeUnknownError           a send kept failing after it may have been stored
     └── DataLossError                      offsets the query needs were removed by retention

Each message names what failed and what to do, as it reaches the user through Spark's
query exception or the replay's error line. A bad option is
:class:`spark_jobs.options.OptionError`, raised before anything is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class SpoolmqError(RuntimeError):
    """Any failure talking to spoolmq from a Spark job."""


class BrokerRefusedError(SpoolmqError):
    """The broker answered with an error that a retry would not change."""

    def __init__(self, message: str, status: int, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class AuthenticationError(BrokerRefusedError):
    """401: the request had no token, or one the broker does not know."""


class PermissionDeniedError(BrokerRefusedError):
    """403: the token lacks the permission."""


class UnknownTopicError(BrokerRefusedError):
    """404 TOPIC_NOT_FOUND."""


class IdempotencyKeyReusedError(BrokerRefusedError):
    """422 IDEMPOTENCY_KEY_REUSED: the rows under a key differ from an earlier attempt's."""


class BrokerUnavailableError(SpoolmqError):
    """No usable answer after every retry (refused connections, timeouts, and the statuses
    a retry may change)."""


class OutcomeUnknownError(BrokerUnavailableError):
    """A keyed send kept failing after it may have been stored; retrying it later with the
    same key inside the dedup window is safe."""


@dataclass(frozen=True, slots=True)
class LostOffsets:
    """Offsets [lost_from, lost_to) of one queue, no longer stored."""

    topic: str
    queue_id: int
    lost_from: int
    lost_to: int

    @property
    def count(self) -> int:
        return self.lost_to - self.lost_from

    def __str__(self) -> str:
        return (
            f"{self.topic}/{self.queue_id}: offsets {self.lost_from} to {self.lost_to - 1} "
            f"({self.count:,} messages)"
        )


class DataLossError(SpoolmqError):
    """Offsets a query needs are gone (retention): every queue's lost range, and ``advice``,
    what to change (it depends on where the query's positions came from)."""

    def __init__(self, losses: Sequence[LostOffsets], advice: str) -> None:
        self.losses = tuple(losses)
        self.advice = advice
        total = sum(loss.count for loss in self.losses)
        queues = "queue" if len(self.losses) == 1 else "queues"
        listed = "; ".join(str(loss) for loss in self.losses)
        super().__init__(
            f"Offsets the query needs are no longer stored ({total:,} in {len(self.losses)} "
            f"{queues}): {listed}. {advice}"
        )

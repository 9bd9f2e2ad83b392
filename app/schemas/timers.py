"""Timer messages: the answer to a cancel, and where the wheel stands."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from app.schemas.common import ResponseBody
from services import CancelResult, TimerProgress


class TimerCancelOut(ResponseBody):
    topic: str
    uniq_key: str = Field(description="UNIQ_KEY of the cancelled message.")
    outcome: Literal["cancelled", "already_cancelled"] = Field(
        description=(
            "cancelled: it will never be delivered. already_cancelled: an earlier cancel did "
            "it. A message already delivered answers 409 TIMER_ALREADY_DELIVERED instead."
        )
    )
    deliver_at: int = Field(description="When it was to be delivered (ms since the epoch).")


def timer_cancel_out(result: CancelResult, precision_ms: int) -> TimerCancelOut:
    return TimerCancelOut(
        topic=result.topic,
        uniq_key=result.uniq_key,
        outcome=result.outcome.value,
        deliver_at=result.fire_ms + precision_ms,
    )


class TimerStatusOut(ResponseBody):
    running: bool = Field(description="False on a slave, or with timer messages switched off.")
    precision_ms: int
    max_delay_s: int
    read_time_ms: int | None = Field(
        default=None, description="Every slot before this time has fired."
    )
    enqueue_behind: int | None = Field(
        default=None, description="Timer messages stored but not yet placed in the wheel."
    )
    scheduled: int = Field(default=0, description="Placed in the wheel since the start.")
    delivered: int = Field(default=0, description="Delivered since the start.")
    cancels_accepted: int = Field(
        default=0,
        description=(
            "Cancels answered `cancelled` since the start (a repeat, `already_cancelled`, is "
            "not counted again): each of these messages will never be delivered. It is counted "
            "in `cancelled` too once its time comes."
        ),
    )
    cancelled: int = Field(
        default=0,
        description=(
            "Cancelled messages dropped at their time since the start: a cancel counts here "
            "only when the message's time comes (see `cancels_accepted`)."
        ),
    )
    rolled: int = Field(default=0, description="Put back for a later turn of the wheel.")


def timer_status_out(
    progress: TimerProgress | None, precision_ms: int, max_delay_s: int
) -> TimerStatusOut:
    if progress is None:
        return TimerStatusOut(running=False, precision_ms=precision_ms, max_delay_s=max_delay_s)
    stats = progress.stats
    return TimerStatusOut(
        running=True,
        precision_ms=precision_ms,
        max_delay_s=max_delay_s,
        read_time_ms=progress.read_time_ms,
        enqueue_behind=progress.enqueue_behind,
        scheduled=stats.scheduled,
        delivered=stats.delivered,
        cancels_accepted=stats.cancels_accepted,
        cancelled=stats.cancelled,
        rolled=stats.rolled,
    )

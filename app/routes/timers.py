"""Timer messages: cancel one by its handle, and see where the wheel stands."""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Path

from app.deps import BrokerDep
from app.routes.params import TopicPath
from app.schemas.timers import TimerCancelOut, TimerStatusOut, timer_cancel_out, timer_status_out

router = APIRouter(tags=["messages"])

TIMER_HANDLE_PATTERN: Final = "^dj[EI]g[A-Za-z0-9_-]{10,}$"
"""A timer handle's shape: base64url of ``v2 `` (``djIg``; ``djEg`` for ``v1 ``) and the rest
of its text (only the broker can tell whether it names a timer)."""

TimerHandlePath = Annotated[
    str,
    Path(
        min_length=1,
        max_length=2048,
        description="The timer_handle of the send's receipt: base64url (no padding) of "
        "`v2 <topic> <broker group> <deliver ms> <UNIQ_KEY>`.",
        json_schema_extra={"pattern": TIMER_HANDLE_PATTERN},
    ),
]


@router.delete(
    "/v1/topics/{topic}/timers/{handle}",
    operation_id="cancelTimer",
    summary="Cancel a timer message before it is delivered",
    description=(
        "A cancelled timer message is never delivered. Once delivered it cannot be cancelled: "
        "409 TIMER_ALREADY_DELIVERED. A handle of another topic or broker, or not one at all: "
        "400 INVALID_TIMER_HANDLE; no such message: 404 TIMER_NOT_FOUND."
    ),
    response_model=TimerCancelOut,
)
async def cancel_timer(
    topic: TopicPath, handle: TimerHandlePath, broker: BrokerDep
) -> TimerCancelOut:
    result = await broker.timers.cancel(topic, handle)
    return timer_cancel_out(result, broker.timers.precision_ms)


@router.get(
    "/v1/timers",
    operation_id="getTimerStatus",
    summary="The timer wheel: precision, how far it has fired, what it did",
    response_model=TimerStatusOut,
)
async def timer_status(broker: BrokerDep) -> TimerStatusOut:
    timers = broker.timers
    return timer_status_out(timers.progress(), timers.precision_ms, timers.config.max_delay_s)

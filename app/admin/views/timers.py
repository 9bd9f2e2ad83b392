"""Upcoming timer deliveries for people: how many wait per topic and time bucket, the next
ones with when they are due (the ``deliver_at`` their send asked for) and what they hold,
what the wheel did since the start, and a button to cancel one (it asks first). Everything
goes through :class:`services.TimerService`, as ``DELETE /v1/topics/{topic}/timers/{handle}``
and ``GET /v1/timers`` do."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.problems import AdminRoute
from app.admin.rendering import PREFIX, redirect, render
from app.deps import BrokerDep
from services import TIMER_BUCKETS

router = APIRouter(route_class=AdminRoute)

NEXT_COUNT = 50


@router.get("/timers", name="admin-timers")
async def list_timers(request: Request, broker: BrokerDep) -> Response:
    timers = broker.timers
    topic = request.query_params.get("topic", "").strip()
    upcoming = timers.upcoming(topic or None, next_count=NEXT_COUNT)
    nexts = []
    if upcoming is not None:
        nexts = [
            (timer, timers.handle_for(timer.topic, timer.fire_ms, timer.uniq_key))
            for timer in upcoming.next
        ]
    context = {
        "title": "Timers",
        "nav": "timers",
        "topic": topic,
        "precision_ms": timers.precision_ms,
        "progress": timers.progress(),
        "buckets": [label for label, _ in TIMER_BUCKETS],
        "upcoming": upcoming,
        "nexts": nexts,
        "cancelled": request.query_params.get("cancelled", ""),
    }
    return render(request, "timers.html", context)


@router.post("/timers/{topic}/{handle}/cancel", name="admin-timer-cancel")
async def cancel_timer(request: Request, topic: str, handle: str, broker: BrokerDep) -> Response:
    """Cancel one waiting timer message, as its producer would with the receipt's handle."""
    result = await broker.timers.cancel(topic, handle)
    done = f"{result.uniq_key} of {topic} {result.outcome.value.replace('_', ' ')}"
    return redirect(request, f"{PREFIX}/timers?{urlencode({'cancelled': done})}")

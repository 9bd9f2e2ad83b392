"""A message's timeline: every traced step in order with the time between steps (one
format, to the millisecond), and each consumer group's state and gap. Reached from a message
search's results, the DLQ pages and a POP group's in-flight page."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin import browse
from app.admin.forms import Form, FormError
from app.admin.problems import AdminRoute
from app.admin.rendering import PREFIX, format_ms, redirect, render
from app.deps import BrokerDep
from services import Consumer, TraceEvent, format_millis

router = APIRouter(route_class=AdminRoute)

STEP_NAMES: Final = {
    "stored": "stored",
    "timer_scheduled": "timer scheduled",
    "timer_fired": "timer fired",
    "timer_cancelled": "timer cancelled",
    "transaction_half": "transaction half stored",
    "transaction_commit": "transaction committed",
    "transaction_rollback": "transaction rolled back",
    "transaction_checked": "transaction checked",
    "transaction_gave_up": "transaction check gave up",
    "delivered": "delivered",
    "acked": "acked",
    "nacked": "nacked",
    "invisibility_changed": "invisibility changed",
    "revived": "revived (ack deadline passed)",
    "sent_back": "sent back for retry",
    "dead_lettered": "dead-lettered",
    "redriven": "redriven",
}
"""How the page names each event type."""

STEP_TONES: Final = {
    "acked": "ok",
    "nacked": "warn",
    "revived": "warn",
    "sent_back": "warn",
    "dead_lettered": "bad",
    "timer_cancelled": "warn",
    "transaction_rollback": "warn",
    "transaction_gave_up": "bad",
}
STATE_TONES: Final = {"acked": "ok", "consumed": "ok", "dead_lettered": "bad", "waiting": "warn"}


@dataclass(frozen=True, slots=True)
class StepRow:
    """One event as the page shows it."""

    event: TraceEvent
    name: str
    tone: str
    since_previous: str  # the time since the step before (one format for every duration)
    since_stored: str
    consumer: str
    detail: list[tuple[str, str]]


def consumer_text(consumer: Consumer | None) -> str:
    """``token billing-app · 10.0.0.5:53211 · client worker-3`` (what is known of it)."""
    if consumer is None:
        return ""
    parts = [
        f"token {consumer.token}" if consumer.token else "",
        consumer.address or "",
        f"client {consumer.client_id}" if consumer.client_id else "",
    ]
    return " · ".join(part for part in parts if part)


def detail_items(detail: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A step's facts, by name: times (``…_at``) as UTC times, spans (``…_ms``) as
    durations, yes/no, lists space-separated."""
    return [
        (name, _text(name, value)) for name, value in sorted(detail.items()) if value is not None
    ]


def _text(name: str, value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        if name.endswith("_at"):
            return format_ms(value)
        if name.endswith("_ms"):
            return format_millis(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return " ".join(str(item) for item in value)
    return str(value)


def step_rows(events: Sequence[TraceEvent]) -> list[StepRow]:
    """The events in order, each with the time since the one before and since the store."""
    stored_at = next((e.at for e in events if e.type == "stored"), events[0].at if events else 0)
    rows = []
    previous: int | None = None
    for event in events:
        rows.append(
            StepRow(
                event=event,
                name=STEP_NAMES.get(event.type, event.type),
                tone=STEP_TONES.get(event.type, ""),
                since_previous="" if previous is None else "+" + format_millis(event.at - previous),
                since_stored=format_millis(event.at - stored_at) if event.at >= stored_at else "",
                consumer=consumer_text(event.consumer),
                detail=detail_items(event.detail),
            )
        )
        previous = event.at
    return rows


def trace_url(msg_id: str) -> str:
    """The timeline page of a message."""
    return f"{PREFIX}/messages/{quote(msg_id, safe='')}/trace"


@router.get("/messages/{msg_id}/trace", name="admin-message-trace")
async def show_trace(request: Request, msg_id: str, broker: BrokerDep) -> Response:
    timeline = broker.services.trace.by_id(msg_id)
    steps = step_rows(timeline.events)
    total = format_millis(timeline.events[-1].at - timeline.events[0].at) if steps else ""
    context = {
        "title": f"Trace {timeline.msg_id}",
        "nav": "messages",
        "timeline": timeline,
        "asked": msg_id,
        "steps": steps,
        "span": total,
        "state_tones": STATE_TONES,
    }
    return render(request, "message_trace.html", context)


@router.get("/trace", name="admin-trace-at")
async def trace_at(request: Request, broker: BrokerDep) -> Response:
    """The timeline of the message at a topic, queue and offset (an in-flight row's)."""
    query = Form.query(request.query_params)
    topic = query.required("topic", "Topic")
    queue_id = query.integer("queue_id", "Queue")
    offset = query.integer("offset", "Offset")
    found = browse.by_offset(broker, topic, queue_id, offset, 1)
    if not found.messages or found.messages[0].queue_offset != offset:
        raise FormError("offset", f"{topic} queue {queue_id} holds no message at offset {offset}")
    message = found.messages[0]
    return redirect(request, trace_url(message.uniq_key or message.msg_id))

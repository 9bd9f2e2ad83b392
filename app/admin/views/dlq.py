"""DLQ: per group, browse the dead letters page by page, select them or filter them, preview
a redrive, run it, and see each message's outcome. Everything goes through
:class:`services.dlq.DlqService`, as ``/v1/groups/{group}/dlq/...`` does."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import urlencode

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.forms import Form, FormError
from app.admin.problems import AdminRoute
from app.admin.rendering import PREFIX, path_segment, redirect, render
from app.deps import BrokerDep
from services import (
    DLQ_GROUP_TOPIC_PREFIX,
    MAX_REDRIVE,
    Broker,
    DlqDepth,
    DlqFilter,
    RedriveStatus,
    check_group_name,
    dlq_topic,
    is_dlq_topic,
)

router = APIRouter(route_class=AdminRoute)

PAGE: Final = 50
MAX_PAGE: Final = 500
FILTER_FIELDS: Final = ("ids", "tags", "begin", "end", "limit")
OUTCOME_LABELS: Final = {
    RedriveStatus.WOULD_MOVE: "would be redriven",
    RedriveStatus.MOVED: "redriven",
    RedriveStatus.ALREADY_MOVED: "already redriven",
    RedriveStatus.FAILED: "failed",
}
"""What a redrive did with a dead letter, in words (the API says it with the enum's name)."""


@dataclass(frozen=True, slots=True)
class DlqRow:
    group: str
    depth: DlqDepth
    last_store_timestamp: int


def dlq_rows(broker: Broker) -> list[DlqRow]:
    rows = []
    for config in sorted(broker.topics.all(), key=lambda c: c.topic_name):
        name = config.topic_name
        if is_dlq_topic(name):
            stats = broker.topics.queue_stats(config)
            last = max((q.last_store_timestamp for q in stats), default=0)
            group = name.removeprefix(DLQ_GROUP_TOPIC_PREFIX)
            rows.append(DlqRow(group, broker.dlq.depth(group), last))
    return rows


@router.get("/dlq", name="admin-dlq")
async def list_dead_letter_queues(request: Request, broker: BrokerDep) -> Response:
    group = Form.query(request.query_params).text("group")
    if group:  # the "open a group" box
        return redirect(request, f"{PREFIX}/dlq/{path_segment(group)}")
    context = {"title": "Dead letters", "nav": "dlq", "rows": dlq_rows(broker)}
    return render(request, "dlqs.html", context)


# ==================================================================== one group


def _selection(form: Form) -> DlqFilter:
    return DlqFilter(
        msg_ids=frozenset(word.upper() for word in form.words("ids")),
        tags=frozenset(form.words("tags")),
        begin_ms=form.timestamp("begin", "From"),
        end_ms=form.timestamp("end", "To"),
    )


def _browse_context(broker: Broker, group: str, query: Form) -> dict[str, object]:
    check_group_name(group)
    limit = min(max(query.integer("limit", "Page size", PAGE), 1), MAX_PAGE)
    offset = query.optional_integer("offset", "Offset")
    page = broker.dlq.browse(group, offset, limit, _selection(query))
    filters = {name: query.text(name) for name in FILTER_FIELDS if query.text(name)}
    return {
        "group": group,
        "dlq_topic": dlq_topic(group),
        "page": page,
        "start": max(page.min_offset, offset or 0),
        "filters": filters,
        "filtered": bool(set(filters) - {"limit"}),
        "next_url": _page_url(group, filters, page.next_offset)
        if page.next_offset < page.max_offset
        else "",
        "first_url": _page_url(group, filters, page.min_offset),
    }


def _page_url(group: str, filters: dict[str, str], offset: int) -> str:
    query = urlencode({**filters, "offset": offset})
    return f"{PREFIX}/dlq/{path_segment(group)}?{query}"


@router.get("/dlq/{group}", name="admin-dlq-group")
async def browse_dead_letters(request: Request, group: str, broker: BrokerDep) -> Response:
    query = Form.query(request.query_params)
    context = _browse_context(broker, group, query)
    context.update(title=f"Dead letters of {group}", nav="dlq", max_redrive=MAX_REDRIVE)
    return render(request, "dlq.html", context, fragment="_dlq_list.html")


@router.post("/dlq/{group}/redrive/{mode}", name="admin-dlq-redrive")
async def redrive(request: Request, group: str, mode: str, broker: BrokerDep) -> Response:
    """``mode`` ``preview`` (a dry run) or ``run``; the answer lists every message's outcome."""
    if mode not in ("preview", "run"):
        raise FormError("mode", f"a redrive is a preview or a run, not {mode!r}")
    form = await Form.posted(request)
    check_group_name(group)
    selection = _redrive_selection(form)
    target = form.text("target_topic") or None
    if target is not None:
        broker.topics.get(target)  # a typo must not create a topic
    report = await broker.dlq.redrive(
        group,
        selection,
        target_topic=target,
        dry_run=mode == "preview",
        limit=min(max(form.integer("redrive_limit", "Most messages", 1000), 1), MAX_REDRIVE),
    )
    counts = {status: report.count(status) for status in RedriveStatus}
    headers = {"HX-Trigger": "dlq-changed"} if mode == "run" else None
    context = {
        "group": group,
        "report": report,
        "counts": counts,
        "labels": OUTCOME_LABELS,
        "failed": RedriveStatus.FAILED,
    }
    return render(request, "_redrive_report.html", context, headers=headers)


def _redrive_selection(form: Form) -> DlqFilter:
    if form.text("scope", "selected") == "selected":
        chosen = form.texts("msg_id")
        if not chosen:
            raise FormError(
                "msg_id",
                "select at least one message, or choose “every message matching the filter”",
            )
        return DlqFilter(msg_ids=frozenset(chosen))
    return _selection(form)

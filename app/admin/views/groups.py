"""Groups: list with total lag and lag in seconds; per-queue detail with a lag chart; offset
reset (earliest / latest / a time) that shows the preview first and then applies exactly the
previewed plan. Resets go through :class:`services.offset_reset.OffsetResetService`, as
``POST /v1/groups/{group}/offsets/reset`` does."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.forms import Form, FormError
from app.admin.lag import GroupLag, group_lag, group_names
from app.admin.paging import Pager, page_of
from app.admin.problems import HEADINGS, AdminRoute, Problem
from app.admin.rendering import render
from app.admin.views.pop import pop_rows
from app.deps import BrokerDep
from app.responses import OrjsonResponse
from services import (
    Broker,
    ResetPlan,
    ResetRequest,
    ResetTarget,
    SubscriptionGroupConfig,
    check_group_name,
    queue_views,
)
from services.errors import GroupNotFoundError

router = APIRouter(route_class=AdminRoute)

RESET_TARGETS = (
    ResetTarget.EARLIEST.value,
    ResetTarget.LATEST.value,
    ResetTarget.TIMESTAMP.value,
)


@dataclass(frozen=True, slots=True)
class GroupRow:
    lag: GroupLag
    config: SubscriptionGroupConfig | None  # None: offsets only (the config was deleted)
    dead_letters: int

    @property
    def name(self) -> str:
        return self.lag.group


def _config(broker: Broker, group: str) -> SubscriptionGroupConfig | None:
    try:
        return broker.groups.get(group)
    except GroupNotFoundError:
        return None


def _dead_letters(broker: Broker, group: str) -> int:
    """Dead letters still waiting (a redrive takes them off; see :mod:`services.dlq_watermark`)."""
    return broker.dlq.depth(group).waiting


def group_rows(broker: Broker, search: str = "", after: str = "") -> tuple[list[GroupRow], Pager]:
    """One page of the groups matching the search, with their lag (read for the page's
    groups only)."""
    needle = search.lower()
    names = [name for name in group_names(broker) if needle in name.lower()]
    pager = page_of(names, after, {"q": search})
    rows = [
        GroupRow(group_lag(broker, name), _config(broker, name), _dead_letters(broker, name))
        for name in pager.names
    ]
    return rows, pager


@router.get("/groups", name="admin-groups")
async def list_groups(request: Request, broker: BrokerDep) -> Response:
    query = Form.query(request.query_params)
    search = query.text("q")
    rows, pager = group_rows(broker, search, query.raw("after"))
    context = {"title": "Groups", "nav": "groups", "rows": rows, "pager": pager}
    context["search"] = search
    context["pop_rows"] = pop_rows(broker)
    return render(request, "groups.html", context, fragment="_group_list.html")


# ==================================================================== one group


def _lag_context(broker: Broker, group: str) -> dict[str, object]:
    check_group_name(group)
    lag = group_lag(broker, group)  # GroupNotFoundError when it has no config and no offsets
    config = _config(broker, group)
    consumes_by_pop = config is not None and config.consume_mode == "pop"
    return {
        "group": group,
        "lag": lag,
        "by_topic": lag.by_topic(),
        "show_in_flight": consumes_by_pop or lag.in_flight > 0,
    }


@router.get("/groups/{group}", name="admin-group")
async def show_group(request: Request, group: str, broker: BrokerDep) -> Response:
    context = _lag_context(broker, group)
    context.update(
        title=f"Group {group}",
        nav="groups",
        config=_config(broker, group),
        dead_letters=_dead_letters(broker, group),
        in_flight=sum(q.in_flight for q in queue_views(broker.pop.table, group)),
        targets=RESET_TARGETS,
    )
    return render(request, "group.html", context)


@router.get("/groups/{group}/lag", name="admin-group-lag")
async def lag_tables(request: Request, group: str, broker: BrokerDep) -> Response:
    """The per-queue tables alone (refreshed after a reset, and every few seconds)."""
    return render(request, "_group_lag.html", _lag_context(broker, group))


@router.get("/groups/{group}/lag.json", name="admin-group-lag-json")
async def lag_series(group: str, broker: BrokerDep) -> Response:
    """Lag per queue for the bar chart: ``{"labels": [...], "x": [...], "series": [...]}``."""
    check_group_name(group)
    lag = group_lag(broker, group)
    rows, one_topic = lag.rows, len(lag.topics) == 1
    return OrjsonResponse(
        {
            "labels": [_bar_label(row.topic, row.queue_id, one_topic) for row in rows],
            "x": list(range(len(rows))),
            "series": [{"label": "lag (messages)", "values": [row.lag for row in rows]}],
        }
    )


def _bar_label(topic: str, queue_id: int, one_topic: bool) -> str:
    """``q3`` when the chart shows one topic, else a short ``topic/3``."""
    if one_topic:
        return f"q{queue_id}"
    short = topic if len(topic) <= 14 else topic[:13] + "…"
    return f"{short}/{queue_id}"


# ==================================================================== offset reset


def _reset_request(form: Form, dry_run: bool) -> ResetRequest:
    target = form.text("to", ResetTarget.EARLIEST.value)
    if target not in RESET_TARGETS:
        raise FormError("to", f"reset to one of {', '.join(RESET_TARGETS)}, not {target!r}")
    timestamp = form.timestamp("timestamp", "Time")
    if target == ResetTarget.TIMESTAMP.value and timestamp is None:
        raise FormError("timestamp", "a reset to a time needs the time")
    return ResetRequest(
        ResetTarget(target),
        topic=form.text("topic") or None,
        timestamp_ms=timestamp if target == ResetTarget.TIMESTAMP.value else None,
        dry_run=dry_run,
    )


def fingerprint(plan: ResetPlan) -> str:
    """What the preview showed: every queue's current and target offset."""
    text = ";".join(
        f"{q.topic}:{q.queue_id}:{q.current_offset}:{q.target_offset}" for q in plan.queues
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _reset_context(group: str, plan: ResetPlan) -> dict[str, object]:
    request = plan.request
    return {
        "group": group,
        "plan": plan,
        "fingerprint": fingerprint(plan),
        "to": request.target.value,
        "topic": request.topic or "",
        "timestamp": request.timestamp_ms,
    }


@router.post("/groups/{group}/reset/preview", name="admin-group-reset-preview")
async def preview_reset(request: Request, group: str, broker: BrokerDep) -> Response:
    form = await Form.posted(request)
    check_group_name(group)
    plan = await broker.offset_reset.reset(group, _reset_request(form, dry_run=True))
    return render(request, "_reset_preview.html", _reset_context(group, plan))


@router.post("/groups/{group}/reset/apply", name="admin-group-reset-apply")
async def apply_reset(request: Request, group: str, broker: BrokerDep) -> Response:
    """Apply the previewed plan — unless the offsets moved since; then preview again."""
    form = await Form.posted(request)
    check_group_name(group)
    service = broker.offset_reset
    # Plan and apply run with no await in between: nothing can commit in the meantime.
    plan = await service.reset(group, _reset_request(form, dry_run=True))
    if fingerprint(plan) != form.text("fingerprint"):
        context = _reset_context(group, plan)
        context["stale"] = Problem(
            HEADINGS["STALE_PREVIEW"],
            "STALE_PREVIEW",
            "messages arrived or the group committed after the preview was made; nothing "
            "was changed — check the new numbers below and apply again",
            409,
        )
        return render(request, "_reset_preview.html", context, status=409)
    applied = await service.apply(plan)
    return render(
        request,
        "_reset_applied.html",
        _reset_context(group, applied),
        headers={"HX-Trigger": "offsets-changed"},
    )

"""POP groups for people: per group and queue the messages in flight, the oldest in-flight
age and the next redelivery; and one group's in-flight messages, a page at a time by topic, queue
and offset, with their attempt, holder (the receiving token's name, where auth is on) and
when they return."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.forms import Form, FormError
from app.admin.paging import PAGE_SIZE, Pager
from app.admin.problems import AdminRoute
from app.admin.rendering import render
from app.deps import BrokerDep
from app.schemas.pop import (
    IN_FLIGHT_CURSOR_PATTERN,
    in_flight_cursor,
    parse_in_flight_cursor,
)
from services import (
    Broker,
    InFlightView,
    QueueView,
    check_group_name,
    in_flight_page,
    queue_views,
)

router = APIRouter(route_class=AdminRoute)


@dataclass(frozen=True, slots=True)
class PopGroupRow:
    group: str
    fifo: bool
    queues: list[QueueView]

    @property
    def in_flight(self) -> int:
        return sum(q.in_flight for q in self.queues)


def pop_rows(broker: Broker) -> list[PopGroupRow]:
    """Every group that consumes by POP, with its queues."""
    return [
        PopGroupRow(
            config.group_name, config.fifo, queue_views(broker.pop.table, config.group_name)
        )
        for config in broker.groups.all()
        if config.consume_mode == "pop"
    ]


def in_flight_pager(broker: Broker, group: str, after: str) -> tuple[list[InFlightView], Pager]:
    """A page of the group's in-flight messages after the cursor ``after`` ('' for the first),
    and its links."""
    if after and not re.fullmatch(IN_FLIGHT_CURSOR_PATTERN, after):
        raise FormError("after", "after is not `<topic>:<queue id>:<offset>`")
    key = parse_in_flight_cursor(after) if after else None
    page = in_flight_page(broker.pop.table, group, key, PAGE_SIZE)
    following = page.next_after
    cursors = [in_flight_cursor((i.topic, i.queue_id, i.offset)) for i in page.items]
    next_after = in_flight_cursor(following) if following else None
    return page.items, Pager(cursors, page.total, page.first, next_after, {})


@router.get("/groups/{group}/in-flight", name="admin-group-in-flight")
async def in_flight(request: Request, group: str, broker: BrokerDep) -> Response:
    check_group_name(group)
    items, pager = in_flight_pager(broker, group, Form.query(request.query_params).text("after"))
    context = {
        "title": f"In flight: {group}",
        "nav": "groups",
        "group": group,
        "queues": queue_views(broker.pop.table, group),
        "items": items,
        "pager": pager,
    }
    return render(request, "pop_in_flight.html", context)

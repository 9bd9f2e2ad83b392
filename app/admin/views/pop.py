"""POP groups for people: per group and queue the messages in flight, the oldest in-flight
age and the next redelivery; and a page of one group's in-flight messages with their attempt,
holder (the receiving token's name, where auth is on) and when they return."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.problems import AdminRoute
from app.admin.rendering import render
from app.deps import BrokerDep
from services import Broker, QueueView, check_group_name, in_flight_list, queue_views

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


@router.get("/groups/{group}/in-flight", name="admin-group-in-flight")
async def in_flight(request: Request, group: str, broker: BrokerDep) -> Response:
    check_group_name(group)
    context = {
        "title": f"In flight: {group}",
        "nav": "groups",
        "group": group,
        "queues": queue_views(broker.pop.table, group),
        "items": in_flight_list(broker.pop.table, group),
    }
    return render(request, "pop_in_flight.html", context)

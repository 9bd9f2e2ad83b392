"""Overview: store state, messages in/out per second, top topics, groups with the most lag."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from app.admin.lag import all_group_lags
from app.admin.problems import AdminRoute
from app.admin.rendering import render
from app.admin.traffic import sampled_traffic
from app.deps import BrokerDep
from app.responses import OrjsonResponse
from services import Broker

router = APIRouter(route_class=AdminRoute)

TOP_GROUPS = 8


async def _store_context(broker: Broker) -> dict[str, object]:
    return {
        "state": broker.state.value,
        "gauges": broker.store_gauges(),
        "disk_used": await asyncio.to_thread(broker.store_status.disk_used_bytes),
        "store_dir": str(broker.config.store_dir),
        "parked_pulls": broker.waiters.parked,
        "topic_count": len(broker.topics.all()),
    }


@router.get("/", name="admin-overview")
async def overview(request: Request, broker: BrokerDep) -> Response:
    traffic = sampled_traffic(request.app)
    lags = sorted(all_group_lags(broker), key=lambda g: (-g.total_lag, -g.lag_seconds, g.group))
    context = {
        "title": "Overview",
        "nav": "overview",
        **await _store_context(broker),
        "top_topics": traffic.top_topics(),
        "top_groups": lags[:TOP_GROUPS],
        "group_count": len(lags),
    }
    return render(request, "overview.html", context)


@router.get("/overview/store", name="admin-overview-store")
async def store_panel(request: Request, broker: BrokerDep) -> Response:
    """The store panel alone (the page refreshes it every few seconds)."""
    return render(request, "_store.html", await _store_context(broker))


@router.get("/overview/traffic.json", name="admin-overview-traffic")
async def traffic_series(request: Request) -> Response:
    """Messages in/out per second for uPlot: ``{"x": [...], "series": [...]}``."""
    rates = sampled_traffic(request.app).rates()
    return OrjsonResponse(
        {
            "x": rates.at,
            "series": [
                {"label": "in / s", "values": rates.in_per_s},
                {"label": "out / s", "values": rates.out_per_s},
            ],
        }
    )

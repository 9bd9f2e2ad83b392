"""What every proxy endpoint shares: the request's cluster view, forwarder, send picker and
budget shares, and small parsing helpers."""

from __future__ import annotations

from fastapi import Request

from app.errors import ApiError
from app.proxy.fanout import BudgetShares
from app.proxy.forward import Forwarder
from services.cluster import ClusterView, RouteRegistry
from services.cluster.proxy_routing import SendPicker

DEFAULT_MAX_MESSAGES = 32


def route_registry(request: Request) -> RouteRegistry:
    registry: RouteRegistry = request.app.state.registry
    return registry


def cluster_view(request: Request) -> ClusterView:
    return route_registry(request).view


def forwarder(request: Request) -> Forwarder:
    shared: Forwarder = request.app.state.forwarder
    return shared


def send_picker(request: Request) -> SendPicker:
    picker: SendPicker = request.app.state.picker
    return picker


def budget_shares(request: Request) -> BudgetShares:
    shares: BudgetShares = request.app.state.budget_shares
    return shares


def int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError("VALIDATION_FAILED", f"{name} is an integer, not {raw!r}") from None


def params_without(request: Request, *names: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in request.query_params.multi_items() if k not in names]

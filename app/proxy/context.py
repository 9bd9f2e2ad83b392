"""What every proxy endpoint shares: the proxy's limits, the request's cluster view,
forwarder, send picker and budget shares, and small parsing helpers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qsl

from fastapi import Request
from starlette.datastructures import State

from app.errors import ApiError
from app.proxy.fanout import BudgetShares
from app.proxy.forward import Forwarder
from app.settings import MAX_REQUEST_BYTES
from services.cluster import ClusterView, RouteRegistry, SendPicker

DEFAULT_MAX_MESSAGES = 32
_QUERY: Final = "spoolmq.query"


@dataclass(frozen=True, slots=True)
class ProxyLimits:
    """How long the proxy waits, and how much it reads."""

    send_timeout_s: float = 10.0
    """A send is answered within this: its receipts, a refusal, or 504 OUTCOME_UNKNOWN."""
    send_attempt_timeout_s: float = 6.0
    """One attempt's wait for a broker's answer: longer than a broker's own wait for a sync
    flush or a slave (5 s by default), so a broker that answers late is still heard."""
    connect_timeout_s: float = 2.0
    max_request_bytes: int = MAX_REQUEST_BYTES


class ProxyState(State):
    """The proxy app's ``app.state``, its entries plain attributes as well.

    Starlette's :class:`State` keeps them in a dict that ``__getattr__`` reads, which Python
    calls only after the ordinary look-up failed — an ``AttributeError`` made and dropped
    for each of the five or six reads of every proxied request."""

    def __setattr__(self, key: str, value: Any) -> None:
        object.__setattr__(self, key, value)
        self._state[key] = value

    def __delattr__(self, key: str) -> None:
        object.__delattr__(self, key)
        del self._state[key]


def proxy_limits(request: Request) -> ProxyLimits:
    limits: ProxyLimits = request.app.state.limits
    return limits


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


def query_items(request: Request) -> list[tuple[str, str]]:
    """The request's query parameters in order (parsed once: cheaper than a QueryParams)."""
    return scope_query_items(request.scope)


def scope_query_items(scope: Any) -> list[tuple[str, str]]:
    """:func:`query_items` of a request's ASGI scope."""
    items: list[tuple[str, str]] | None = scope.get(_QUERY)
    if items is None:
        raw = scope["query_string"].decode("latin-1")
        items = scope[_QUERY] = query_items_of(raw) if raw else []
    return items


def query_items_of(raw: str) -> list[tuple[str, str]]:
    """``parse_qsl(raw, keep_blank_values=True)``; by splits alone when nothing in ``raw`` is
    to be unquoted (no ``%``, no ``+``: the common query), where parse_qsl's general steps
    per parameter cost more than the rest of a group pull's planning."""
    if "%" in raw or "+" in raw:
        return parse_qsl(raw, keep_blank_values=True)
    return [(name, value) for name, _, value in (p.partition("=") for p in raw.split("&") if p)]


def query_param(request: Request, name: str) -> str | None:
    """The first value of ``name``, as Starlette's ``query_params.get`` gives it."""
    return scope_query_param(request.scope, name)


def scope_query_param(scope: Any, name: str) -> str | None:
    """:func:`query_param` of a request's ASGI scope."""
    return next((v for k, v in scope_query_items(scope) if k == name), None)


def int_param(request: Request, name: str, default: int) -> int:
    return scope_int_param(request.scope, name, default)


def scope_int_param(scope: Any, name: str, default: int) -> int:
    """:func:`int_param` of a request's ASGI scope."""
    raw = scope_query_param(scope, name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError("VALIDATION_FAILED", f"{name} is an integer, not {raw!r}") from None


def params_without(request: Request, *names: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in query_items(request) if k not in names]

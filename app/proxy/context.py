"""What every proxy endpoint shares: the proxy's limits and parts (one :class:`Proxy` per app,
on ``app.state.proxy`` and in its lifespan's state), and small readers of a request's query."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fastapi import Request

from app.errors import ApiError
from app.proxy.fanout import BudgetShares
from app.proxy.forward import Forwarder
from app.routes.direct import query_pairs
from app.settings import MAX_REQUEST_BYTES
from services import TlsConfig
from services.cluster import ClusterView, RouteRegistry, SendPicker

DEFAULT_MAX_MESSAGES = 32
_QUERY: Final = "spoolmq.query"
PROXY_STATE: Final = "proxy"
"""The proxy's key in its lifespan's state."""


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
    tls: TlsConfig | None = None
    """The proxy's certificate files: https for its clients (with a certificate), the CA
    https brokers and etcd are checked against."""


@dataclass(frozen=True, slots=True)
class Proxy:
    """The parts of one proxy: made when its app starts, shared by every request."""

    limits: ProxyLimits
    registry: RouteRegistry
    """The route table, kept fresh from etcd."""
    forwarder: Forwarder
    picker: SendPicker
    shares: BudgetShares


def proxy_of(request: Request) -> Proxy:
    """The request's proxy: from the lifespan's state in its scope (ASGI lifespan state), else
    from the app's (a request of an ASGI client that runs no lifespan)."""
    state = request.scope.get("state")
    proxy: Proxy | None = state.get(PROXY_STATE) if state else None
    if proxy is None:
        proxy = request.app.state.proxy
    return proxy


def proxy_limits(request: Request) -> ProxyLimits:
    return proxy_of(request).limits


def route_registry(request: Request) -> RouteRegistry:
    return proxy_of(request).registry


def cluster_view(request: Request) -> ClusterView:
    return proxy_of(request).registry.view


def forwarder(request: Request) -> Forwarder:
    return proxy_of(request).forwarder


def send_picker(request: Request) -> SendPicker:
    return proxy_of(request).picker


def budget_shares(request: Request) -> BudgetShares:
    return proxy_of(request).shares


def query_items(request: Request) -> list[tuple[str, str]]:
    """The request's query parameters in order, parsed once per request."""
    scope = request.scope
    items: list[tuple[str, str]] | None = scope.get(_QUERY)
    if items is None:
        items = scope[_QUERY] = query_pairs(scope["query_string"])
    return items


def query_param(request: Request, name: str) -> str | None:
    """The first value of ``name``."""
    return next((v for k, v in query_items(request) if k == name), None)


def int_param(request: Request, name: str, default: int) -> int:
    raw = query_param(request, name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ApiError("VALIDATION_FAILED", f"{name} is an integer, not {raw!r}") from None


def params_without(request: Request, *names: str) -> list[tuple[str, str]]:
    return [(k, v) for k, v in query_items(request) if k not in names]

"""The proxy's ASGI app: one route registry (kept fresh by an etcd watch), keep-alive
connections to the brokers, and the proxy's endpoints — the hot ones ahead of FastAPI
(:mod:`app.proxy.fast`), all inside the HTTP shell every spoolmq server has (request ids,
the body cap, problem answers for unexpected errors)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.responses import Response
from starlette.types import ASGIApp

from app.errors import install_error_handlers, problem_response
from app.middleware import HttpShellMiddleware
from app.proxy import consume, messages, pop, timers, topics, transactions
from app.proxy.context import ProxyLimits, ProxyState
from app.proxy.fanout import BudgetShares
from app.proxy.fast import FastLane, fast_route
from app.proxy.forward import Forwarder
from app.proxy.upstream import Upstream
from services.cluster import EtcdClient, EtcdError, EtcdUnavailableError, RouteRegistry, SendPicker


def create_proxy_app(
    cluster: str, etcd_endpoints: Sequence[str], limits: ProxyLimits | None = None
) -> ASGIApp:
    """A stateless proxy for ``cluster``: everything it knows comes from etcd."""
    limits = limits or ProxyLimits()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        etcd = EtcdClient(list(etcd_endpoints))
        registry = RouteRegistry(etcd, cluster)
        upstream = Upstream(connect_timeout_s=limits.connect_timeout_s)
        app.state.limits = limits
        app.state.registry = registry
        app.state.forwarder = Forwarder(upstream)
        app.state.picker = SendPicker()
        app.state.budget_shares = BudgetShares()
        try:
            await registry.refresh()
        except EtcdUnavailableError:
            pass  # the watch keeps trying; until then every route is unknown
        registry.start()
        try:
            yield
        finally:
            await registry.stop()
            await upstream.aclose()
            await etcd.aclose()

    app = FastAPI(
        title="spoolmq proxy",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        # FastAPI's OpenTelemetry hooks would read the environment on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state = ProxyState()
    install_error_handlers(app)
    app.add_exception_handler(EtcdError, _etcd_error)
    app.add_exception_handler(EtcdUnavailableError, _etcd_error)
    for module in (topics, messages, consume, pop, transactions, timers):
        app.include_router(module.router)
    hot = [
        fast_route("POST", "/v1/topics/{topic}/messages", messages.send),
        fast_route(
            "GET",
            "/v1/topics/{topic}/queues/{queue_id}/messages",
            messages.pull_queue,
            queue_id=int,
        ),
        fast_route("GET", "/v1/groups/{group}/topics/{topic}/messages", consume.pull_group),
        fast_route("POST", "/v1/groups/{group}/topics/{topic}/receive", pop.receive),
    ]
    return HttpShellMiddleware(FastLane(app, hot), max_request_bytes=limits.max_request_bytes)


async def _etcd_error(request: Request, exc: Exception) -> Response:
    """The route table cannot be read or written right now: the client may retry."""
    detail = f"the route table in etcd is not available: {exc}"
    return problem_response(request, "ETCD_UNAVAILABLE", detail, headers={"Retry-After": "1"})

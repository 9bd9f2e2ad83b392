"""The proxy's FastAPI app: one route registry (kept fresh by an etcd watch), one shared
``httpx.AsyncClient`` to the brokers, and the proxy's endpoints."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from starlette.responses import Response

from app.errors import install_error_handlers, problem_response
from app.proxy import consume, messages, pop, topics
from app.proxy.forward import Forwarder
from services.cluster import EtcdClient, EtcdError, EtcdUnavailableError, RouteRegistry, SendPicker

BROKER_TIMEOUT_S = 40.0
"""Long enough for a broker's longest long-poll; a connect failure is still quick."""


def create_proxy_app(cluster: str, etcd_endpoints: Sequence[str]) -> FastAPI:
    """A stateless proxy for ``cluster``: everything it knows comes from etcd."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        etcd = EtcdClient(list(etcd_endpoints))
        registry = RouteRegistry(etcd, cluster)
        client = httpx.AsyncClient(timeout=httpx.Timeout(BROKER_TIMEOUT_S, connect=2.0))
        app.state.registry = registry
        app.state.forwarder = Forwarder(client)
        app.state.picker = SendPicker()
        try:
            await registry.refresh()
        except EtcdUnavailableError:
            pass  # the watch keeps trying; until then every route is unknown
        registry.start()
        try:
            yield
        finally:
            await registry.stop()
            await client.aclose()
            await etcd.aclose()

    app = FastAPI(title="spoolmq proxy", lifespan=lifespan, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.add_exception_handler(EtcdError, _etcd_error)
    app.add_exception_handler(EtcdUnavailableError, _etcd_error)
    for module in (topics, messages, consume, pop):
        app.include_router(module.router)
    return app


async def _etcd_error(request: Request, exc: Exception) -> Response:
    """The route table cannot be read or written right now: the client may retry."""
    detail = f"the route table in etcd is not available: {exc}"
    return problem_response(request, "ETCD_UNAVAILABLE", detail, headers={"Retry-After": "1"})

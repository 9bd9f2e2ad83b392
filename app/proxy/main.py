"""The proxy's ASGI app: one route registry (kept fresh by an etcd watch), keep-alive
connections to the brokers, and the proxy's endpoints inside the HTTP shell every spoolmq
server has (request ids, the body cap, problem answers for unexpected errors), with its own
OpenAPI document (:mod:`app.proxy.openapi`) and the broker's doc pages (:mod:`app.routes.docs`)
— and the server that serves it (:func:`proxy_server`), the busiest operations through its wire
face (:mod:`app.routes.wire`): the same endpoints, below ASGI."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final

from fastapi import FastAPI, Request
from starlette.responses import Response

from app.errors import install_error_handlers, problem_response
from app.grpc import GrpcExtraMissingError
from app.main import spoolmq_version
from app.middleware import HttpShellMiddleware
from app.proxy import consume, messages, pop, timers, topics, trace, transactions
from app.proxy.context import PROXY_STATE, Proxy, ProxyLimits
from app.proxy.fanout import BudgetShares
from app.proxy.forward import Forwarder
from app.proxy.openapi import DESCRIPTION, TAGS, proxy_openapi
from app.proxy.upstream import Upstream
from app.routes import docs
from app.routes.direct import DirectOperations
from app.routes.table import RouteTable, add_routes
from app.routes.wire import EndpointFace
from app.server import Server, ServerLimits
from services.cluster import EtcdClient, EtcdError, EtcdUnavailableError, RouteRegistry, SendPicker

if TYPE_CHECKING:
    from app.grpc.server import GrpcServer

DIRECT_OPERATIONS: Final = frozenset(
    {"sendMessages", "pullMessages", "pullGroupMessages", "receiveMessages"}
)
"""The operations clients call in loops, served by the server's wire face."""


def create_proxy_app(
    cluster: str,
    etcd_endpoints: Sequence[str],
    limits: ProxyLimits | None = None,
    *,
    grpc_listen: str | None = None,
) -> FastAPI:
    """A stateless proxy for ``cluster``: everything it knows comes from etcd. With
    ``grpc_listen``, its RocketMQ 5 gRPC face serves there too (:mod:`app.grpc.proxy_face`)."""
    limits = limits or ProxyLimits()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Proxy]]:
        etcd = EtcdClient(list(etcd_endpoints), tls=limits.tls)
        registry = RouteRegistry(etcd, cluster)
        upstream = Upstream(connect_timeout_s=limits.connect_timeout_s, tls=limits.tls)
        proxy = Proxy(limits, registry, Forwarder(upstream), SendPicker(), BudgetShares())
        app.state.proxy = proxy
        try:
            await registry.refresh()
        except EtcdUnavailableError:
            pass  # the watch keeps trying; until then every route is unknown
        registry.start()
        rocketmq_face: GrpcServer | None = app.state.grpc
        if rocketmq_face is not None:
            await rocketmq_face.start()
        try:
            yield {PROXY_STATE: proxy}
        finally:
            if rocketmq_face is not None:
                await rocketmq_face.stop()
            await registry.stop()
            await upstream.aclose()
            await etcd.aclose()

    app = FastAPI(
        title="spoolmq proxy",
        version=spoolmq_version(),
        description=DESCRIPTION,
        openapi_tags=TAGS,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        # FastAPI's OpenTelemetry hooks would read the environment on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    install_error_handlers(app)
    app.add_exception_handler(EtcdError, _etcd_error)
    app.add_exception_handler(EtcdUnavailableError, _etcd_error)
    # trace first: its /v1/messages/trace is not the message id "trace" of messages'
    for module in (trace, messages, consume, pop, topics, transactions, timers):
        add_routes(app, module.router)
    add_routes(app, docs.router)
    app.mount("/static", docs.static_files(), name="static")
    app.openapi = lambda: proxy_openapi(app)  # type: ignore[method-assign]
    app.add_middleware(HttpShellMiddleware, max_request_bytes=limits.max_request_bytes)
    app.state.limits = limits
    app.state.grpc = None if grpc_listen is None else proxy_grpc_server(app, grpc_listen)
    return app


def proxy_grpc_server(app: FastAPI, listen: str) -> GrpcServer:
    """The proxy's gRPC face, imported only when asked for: the HTTP proxy needs none of it."""
    try:
        from app.grpc.proxy_face import ProxyMessagingFace
        from app.grpc.server import GrpcServer
    except ImportError as exc:
        raise GrpcExtraMissingError(
            f"--grpc-listen needs the grpc extra (pip install 'spoolmq[grpc]'): {exc}"
        ) from exc
    limits: ProxyLimits = app.state.limits
    face = ProxyMessagingFace(app, max_body_bytes=limits.max_request_bytes)
    return GrpcServer(face, listen)


def proxy_server(
    app: FastAPI,
    limits: ServerLimits | None = None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> Server:
    """The server ``spoolmq proxy`` runs ``app`` (from :func:`create_proxy_app`) on: its
    :data:`DIRECT_OPERATIONS` served by the wire face, every other request by the app; every
    answer carries ``headers`` (the worker's, :mod:`app.proxy.workers`)."""
    proxy_limits: ProxyLimits = app.state.limits
    direct = DirectOperations(app, RouteTable(app.router.routes), DIRECT_OPERATIONS)
    face = EndpointFace(direct, proxy_limits.max_request_bytes)
    tls = proxy_limits.tls
    context = tls.server_context() if tls is not None and tls.serves else None
    return Server(app, limits, face=face, headers=headers, ssl=context)


async def _etcd_error(request: Request, exc: Exception) -> Response:
    """The route table cannot be read or written right now: the client may retry."""
    detail = f"the route table in etcd is not available: {exc}"
    return problem_response(request, "ETCD_UNAVAILABLE", detail, headers={"Retry-After": "1"})

"""The FastAPI application: ``create_app()`` builds it around one :class:`services.Broker`.

The broker starts in the background (opening and recovering a big store takes a while), so
``/healthz`` answers at once and ``/readyz`` turns 200 when recovery is done. Shutdown answers
parked long-polls, persists offsets and configs, and closes the store.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from fastapi import FastAPI

from app import admin
from app.errors import install_error_handlers
from app.grpc import grpc_server
from app.middleware import HttpShellMiddleware
from app.openapi import build_openapi
from app.replica_guard import ReplicaGuardMiddleware
from app.routes import (
    cluster,
    dlq,
    docs,
    groups,
    health,
    messages,
    pop,
    redelivery,
    replication,
    timers,
    topics,
    trace,
    transactions,
)
from app.routes.direct import DirectDispatch
from app.routes.table import RouteTable, add_routes
from app.security import check_bind, install_security, replica_keys
from app.server import Server, ServerLimits
from app.settings import Settings, get_settings
from services import Broker
from services.cluster import ClusterMember

log = logging.getLogger("spoolmq")

StartFailureHook = Callable[[BaseException], None]

DESCRIPTION = """\
An HTTP message queue on Apache RocketMQ's storage design: one append-only CommitLog, a
ConsumeQueue per (topic, queue), long-polling pulls, consumer offsets.

Errors are `application/problem+json` with a stable `code`; every response carries
`X-Request-Id`. Limits: request bodies up to 4 MiB (413 beyond, refused before reading),
batches up to 1000 messages, long-polls up to 30000 ms, pulls up to 1024 messages.
"""

TAGS: list[dict[str, Any]] = [
    {"name": "messages", "description": "Send, pull and look up messages."},
    {"name": "topics", "description": "Topic configs and queue offsets."},
    {"name": "groups", "description": "Consumer groups: configs, group pulls, offsets, lag."},
    {"name": "health", "description": "Liveness, readiness, metrics."},
    {
        "name": "replication",
        "description": "Replica status, epochs and configs (what a slave fetches from its "
        "master). A slave answers every write with 421 NOT_MASTER naming its master.",
    },
    {
        "name": "cluster",
        "description": "Routes across broker groups (cluster mode: kept in etcd). During a "
        "failover a slave answers writes with 503 NO_MASTER and Retry-After.",
    },
]


def spoolmq_version() -> str:
    try:
        return version("spoolmq")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        return "0.0.0"


def create_app(
    settings: Settings | None = None, *, on_start_failure: StartFailureHook | None = None
) -> FastAPI:
    """Build the app; the broker opens the store when the app's lifespan starts."""
    settings = settings or get_settings()
    # A master with an auth file takes on its HA port only slaves proving an admin token.
    config = replace(settings.broker_config(), ha_accepted_keys=replica_keys(settings.auth_file))
    broker = Broker(config)
    cluster_config = settings.cluster_config()
    member = ClusterMember(broker, cluster_config, on_start_failure) if cluster_config else None
    rocketmq_face = None  # RocketMQ 5's gRPC face, on its own port when asked for
    if settings.grpc_listen is not None:
        rocketmq_face = grpc_server(
            broker,
            settings.grpc_listen,
            broker_name=settings.broker_name,
            max_body_bytes=settings.max_message_size,
            auth_file=settings.auth_file,
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start = asyncio.create_task(_start(broker, member, on_start_failure), name="broker-start")
        if rocketmq_face is not None:
            await rocketmq_face.start()
        try:
            yield
        finally:
            if rocketmq_face is not None:
                await rocketmq_face.stop()
            await asyncio.wait({start})  # an open in progress cannot be interrupted
            if member is not None:
                await member.stop()
            await broker.stop()

    app = FastAPI(
        title="spoolmq",
        version=spoolmq_version(),
        description=DESCRIPTION,
        openapi_tags=TAGS,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        # spoolmq exports its own metrics (/metrics); FastAPI's OpenTelemetry hooks would
        # otherwise look up the provider configuration (environment reads) on every request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
    )
    app.state.broker = broker
    app.state.cluster = member
    app.state.settings = settings
    app.state.grpc = rocketmq_face
    install_error_handlers(app)
    # The API's routes first, the busiest at the head: a request tries routes in order.
    routes = RouteTable(app.router.routes)
    for module in (
        trace,  # before messages: /v1/messages/trace is not a message id
        messages,
        timers,
        topics,
        groups,
        dlq,
        redelivery,
        pop,
        transactions,
        replication,
        cluster,
        health,
    ):
        add_routes(app, module.router)
    add_routes(app, docs.router)
    # innermost: the operations clients call in loops, at once
    app.add_middleware(DirectDispatch, fastapi=app, table=routes, operations=DIRECT_OPERATIONS)
    app.add_middleware(ReplicaGuardMiddleware, replica=broker.replica)  # after security
    install_security(app, settings, routes)  # before the admin pages, inside the shell
    app.add_middleware(HttpShellMiddleware, max_request_bytes=settings.max_request_bytes)
    app.mount("/static", docs.static_files(), name="static")
    app.include_router(admin.router)  # browser pages under /admin, not in the schema
    app.mount("/admin/static", admin.static_files(), name="admin-static")
    app.openapi = lambda: build_openapi(app)  # type: ignore[method-assign]
    return app


DIRECT_OPERATIONS: Final = frozenset({"sendMessages", "pullMessages", "pullGroupMessages"})
"""The operations clients call in loops, served straight from their endpoints
(:mod:`app.routes.direct`); FastAPI serves every other."""


def build_server(app: FastAPI, settings: Settings) -> Server:
    """A server for ``app`` with the settings' limits; it answers the broker's parked
    long-polls first when it stops.

    Raises UnsafeBindError for a non-loopback host without an auth file or --allow-anonymous.
    """
    check_bind(
        settings.host,
        auth_enabled=settings.auth_file is not None,
        allow_anonymous=settings.allow_anonymous,
    )
    limits = ServerLimits(
        header_timeout_s=settings.header_read_timeout_s,
        body_timeout_s=settings.body_read_timeout_s,
        keep_alive_timeout_s=settings.keep_alive_timeout_s,
        max_header_bytes=settings.max_header_bytes,
        graceful_shutdown_s=settings.graceful_shutdown_s,
        access_log=settings.access_log,
    )
    tls = settings.tls()
    context = tls.server_context() if tls is not None and tls.serves else None
    return Server(app, limits, on_shutdown=app.state.broker.begin_shutdown, ssl=context)


async def _start(
    broker: Broker, member: ClusterMember | None, on_failure: StartFailureHook | None
) -> None:
    try:
        if member is not None:
            await member.join()  # the election decides master or slave
        await broker.start()
        if member is not None:
            member.start()
    except Exception as exc:
        log.error("spoolmq could not start: %s", exc)
        if on_failure is not None:
            on_failure(exc)
        return
    # Everything built so far (app, routes, schemas, the opened store) lives as long as the
    # process: keep it out of the collector's generations so full collections stay short and
    # do not show up as long-poll wake-up latency.
    gc.collect()
    gc.freeze()

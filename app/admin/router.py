"""The admin router: every page under ``/admin``, and the static files they load.

Include it with ``app.include_router(router)`` (pass ``dependencies=[...]`` there to put the
pages behind a login) and mount :func:`static_files` at ``/admin/static`` (name
``admin-static``). The router's lifespan samples the traffic counters for the Overview
chart. Nothing here is part of the OpenAPI document.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.staticfiles import StaticFiles

from app.admin.rendering import PREFIX, STATIC_DIR
from app.admin.traffic import sampling_lifespan
from app.admin.views import (
    clients,
    cluster,
    dlq,
    groups,
    messages,
    overview,
    pop,
    timers,
    topics,
    trace,
    transactions,
)

router = APIRouter(prefix=PREFIX, include_in_schema=False, lifespan=sampling_lifespan)
for _module in (
    overview,
    topics,
    pop,
    groups,
    trace,
    messages,
    dlq,
    transactions,
    timers,
    cluster,
    clients,
):
    router.include_router(_module.router)


def static_files() -> StaticFiles:
    """The pages' CSS and JavaScript, and the vendored htmx and uPlot (see VERSIONS.txt)."""
    return StaticFiles(directory=STATIC_DIR)

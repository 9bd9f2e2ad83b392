"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.responses import Response

from app.deps import BrokerDep
from app.metrics import render_metrics
from app.responses import OrjsonResponse
from app.schemas import HealthResponse, ReadyResponse
from services import BrokerState
from services.errors import BrokerUnavailableError

router = APIRouter(tags=["health"])


@router.get(
    "/healthz",
    operation_id="healthz",
    summary="Liveness: the process answers (even while the store recovers)",
    response_model=HealthResponse,
)
async def healthz(broker: BrokerDep) -> Response:
    if broker.state is BrokerState.FAILED:
        raise BrokerUnavailableError(f"the broker failed to start: {broker.failure}")
    return OrjsonResponse({"status": "ok"})


@router.get(
    "/readyz",
    operation_id="readyz",
    summary="Readiness: recovery is done, the store is open and accepts writes",
    response_model=ReadyResponse,
)
async def readyz(broker: BrokerDep) -> Response:
    if broker.state is not BrokerState.RUNNING:
        raise BrokerUnavailableError(f"the broker is {broker.state.value}")
    gauges = broker.store_gauges()
    if not gauges.writeable:
        raise BrokerUnavailableError(
            f"the store refuses writes: {gauges.not_writeable_reason}", retry_after_s=5
        )
    return OrjsonResponse(
        {"status": "ready", "state": broker.state.value, "parked_pulls": broker.waiters.parked}
    )


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }
    },
)
async def metrics(broker: BrokerDep) -> Response:
    disk = await asyncio.to_thread(broker.store_status.disk_used_bytes) if broker.running else 0
    return Response(
        render_metrics(broker, disk), media_type="text/plain; version=0.0.4; charset=utf-8"
    )

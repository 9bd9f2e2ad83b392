"""Replication: a replica's status, and what a slave fetches from its master over HTTP."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.deps import BrokerDep
from app.schemas.replication import (
    EpochOut,
    EpochsOut,
    ReplicaStatusOut,
    ReplicationConfigsOut,
    replica_status_out,
)

router = APIRouter(tags=["replication"])


@router.get(
    "/v1/replication",
    operation_id="getReplicaStatus",
    summary="This replica's role, epoch and offsets; a master's slaves and sync-state set",
    response_model=ReplicaStatusOut,
)
async def replica_status(broker: BrokerDep) -> ReplicaStatusOut:
    return replica_status_out(broker.replica.status())


@router.get(
    "/v1/replication/epochs",
    operation_id="getReplicationEpochs",
    summary="The epoch entries (epoch, start offset) of this replica's CommitLog",
    description=(
        "A replica joining this one compares them with its own to find the last offset both "
        "logs agree on, and truncates the rest."
    ),
    response_model=EpochsOut,
)
async def replication_epochs(broker: BrokerDep) -> EpochsOut:
    broker.replica.status()  # 503 until the store is open
    return EpochsOut(
        epochs=[
            EpochOut(epoch=e.epoch, startOffset=e.start_offset)
            for e in broker.replica.epoch_entries()
        ]
    )


@router.get(
    "/v1/replication/configs",
    operation_id="getReplicationConfigs",
    summary="Topic and group configs, consumer and delay offsets, POP state: what a slave copies",
    response_model=ReplicationConfigsOut,
)
async def replication_configs(broker: BrokerDep) -> dict[str, Any]:
    return broker.replica.config_snapshot()

"""Bodies of the replication routes: replica status, epochs, the configs a slave copies."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.schemas.common import ResponseBody
from services.ha import ReplicaStatus


class MasterOut(ResponseBody):
    name: str
    http_url: str
    ha_address: str


class SlaveOut(ResponseBody):
    name: str = Field(description="The slave's broker name.")
    acked_offset: int = Field(description="CommitLog offset the slave reported last.")
    lag_bytes: int = Field(description="The master's max offset minus the acked offset.")
    lag_seconds: float | None = Field(
        description="Store time of the master's last message minus that of the slave's last; "
        "null when not known (older than what the master remembers)."
    )
    in_sync: bool = Field(description="In the sync-state set.")


class ReplicaStatusOut(ResponseBody):
    role: Literal["master", "slave"]
    epoch: int = Field(description="The newest epoch this replica knows.")
    broker_name: str
    replication: Literal["async", "sync"]
    max_physical_offset: int = Field(description="End of this replica's CommitLog.")
    confirmed_offset: int = Field(description="CommitLog offset this replica has on disk.")
    master: MasterOut | None = Field(description="A slave's master; null on a master.")
    ha_address: str | None = Field(description="A master's HA listen address, if any.")
    connected: bool = Field(description="A slave: streaming from its master now.")
    error: str | None = Field(description="A slave: why it does not replicate, if it does not.")
    sync_state_set: list[str] = Field(description="A master: the slaves in sync.")
    in_sync_replicas: int = Field(
        description="A master: itself and its slaves in sync (0 on a slave)."
    )
    min_in_sync_replicas: int = Field(
        description="With fewer replicas in sync a master refuses writes "
        "(503 NOT_ENOUGH_IN_SYNC_REPLICAS)."
    )
    slaves: list[SlaveOut] = Field(description="A master: its connected slaves.")


class EpochOut(ResponseBody):
    epoch: int
    startOffset: int = Field(description="CommitLog offset where the epoch starts.")


class EpochsOut(ResponseBody):
    epochs: list[EpochOut] = Field(description="Oldest first.")


class ReplicationConfigsOut(ResponseBody):
    """Each config file's content, in the file's own JSON layout."""

    topics: dict[str, Any]
    subscription_groups: dict[str, Any]
    consumer_offsets: dict[str, Any]
    delay_offsets: dict[str, Any]
    pop_state: dict[str, Any]
    pop_secret: str | None = Field(
        description="The hex secret that signs POP receipt handles (null until the first "
        "receive), copied so that handles stay valid when a slave takes over."
    )
    timer_progress: dict[str, int] | None = Field(
        default=None,
        description="How far the timer wheel has fired: read_time_ms (every timer message "
        "due before it was delivered) and commit_offset (the CommitLog offset below which "
        "those deliveries lie); null when the wheel is not running. A promoted slave whose "
        "log reaches commit_offset rebuilds its wheel from there.",
    )


def replica_status_out(status: ReplicaStatus) -> ReplicaStatusOut:
    master = status.master
    return ReplicaStatusOut(
        role=status.role,
        epoch=status.epoch,
        broker_name=status.broker_name,
        replication=status.replication,
        max_physical_offset=status.max_physical_offset,
        confirmed_offset=status.confirmed_offset,
        master=MasterOut(name=master.name, http_url=master.http_url, ha_address=master.ha_address)
        if master is not None
        else None,
        ha_address=status.ha_address,
        connected=status.connected,
        error=status.error,
        sync_state_set=sorted(status.sync_state_set),
        in_sync_replicas=status.in_sync_replicas,
        min_in_sync_replicas=status.min_in_sync_replicas,
        slaves=[
            SlaveOut(
                name=s.name,
                acked_offset=s.acked_offset,
                lag_bytes=s.lag_bytes,
                lag_seconds=s.lag_seconds,
                in_sync=s.in_sync,
            )
            for s in status.slaves
        ],
    )

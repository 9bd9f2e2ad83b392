"""What a replica says about itself: role, epoch, offsets, and a master's view of its slaves."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from services.ha.address import MasterAddress

Role = Literal["master", "slave"]


@dataclass(frozen=True, slots=True)
class SlaveStatus:
    """One slave as its master sees it."""

    name: str
    acked_offset: int
    lag_bytes: int
    lag_seconds: float | None  # master's last store time minus the slave's; None: unknown
    in_sync: bool


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """A replica's role and progress (``GET /v1/replication``)."""

    role: Role
    epoch: int
    broker_name: str
    max_physical_offset: int
    confirmed_offset: int  # what this replica has on disk
    master: MasterAddress | None  # a slave's master
    ha_address: str | None  # a master's HA listen address
    replication: Literal["async", "sync"]
    slaves: tuple[SlaveStatus, ...] = ()
    sync_state_set: frozenset[str] = frozenset()
    in_sync_replicas: int = 0  # a master: itself and its in-sync slaves (0 on a slave)
    min_in_sync_replicas: int = 1  # fewer in sync: the master refuses writes
    connected: bool = False  # a slave: streaming from its master now
    error: str | None = None  # a slave: why it does not stream

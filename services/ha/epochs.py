"""The master's epochs over HTTP, and whether this replica's log diverges from them."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from services.errors import ReplicaDivergedError
from services.tls import TlsConfig, client_context
from storage.epoch_file import EpochEntry, consistent_offset, decode_entries

HTTP_TIMEOUT_S = 5.0


async def fetch_master_epochs(
    http_url: str, headers: Mapping[str, str] | None = None, tls: TlsConfig | None = None
) -> list[EpochEntry]:
    """``GET {http_url}/v1/replication/epochs``; httpx errors and ValueError pass through.

    ``headers`` carry the replication token when the master has an auth file; an https
    master's certificate is checked against ``tls``'s CA.
    """
    async with httpx.AsyncClient(
        base_url=http_url,
        timeout=HTTP_TIMEOUT_S,
        headers=headers,
        verify=client_context(tls) or True,
    ) as client:
        response = await client.get("/v1/replication/epochs")
        response.raise_for_status()
        return decode_entries(response.json())


def divergence_point(
    local: tuple[EpochEntry, ...] | list[EpochEntry],
    remote: list[EpochEntry],
    local_max: int,
) -> int | None:
    """Where this log must be cut to follow the master; None when it is consistent.

    A replica without epochs (never replicated, never a master) has nothing to compare and
    is taken as it is; one with no epoch in common with the master is cut to 0.
    """
    if not local or local_max == 0:
        return None
    point = consistent_offset(local, remote, local_max)
    if point < 0:
        return 0
    return point if point < local_max else None


def check_consistent(
    local: tuple[EpochEntry, ...], remote: list[EpochEntry], local_max: int, master: str
) -> None:
    """ReplicaDivergedError when this log has a tail the master's epochs do not confirm."""
    point = divergence_point(local, remote, local_max)
    if point is not None:
        raise ReplicaDivergedError(
            f"this replica's CommitLog diverges from master {master} after offset {point} "
            f"(it ends at {local_max}); restart it as a slave with truncate_on_divergence "
            "to cut the unconfirmed tail"
        )

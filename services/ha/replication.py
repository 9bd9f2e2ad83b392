"""The master's side of the put path: admit a put, wake the HA connections, confirm per the mode.

With ``min_in_sync_replicas`` N (RocketMQ 5's ``minInSyncReplicas``, Kafka's
``min.insync.replicas``) a master that counts fewer than N replicas in sync -- itself and the
slaves of its sync-state set -- refuses every put before it appends
(:class:`NotEnoughInSyncReplicasError`: nothing was stored). A put admitted before the set
shrank is stored; like RocketMQ, it is not refused after the fact: it waits for its replica
acknowledgement (see :class:`~services.ha.group_transfer.GroupTransferService`) and is
answered PUT_OK only once at least N - 1 in-sync slaves have it, else FLUSH_SLAVE_TIMEOUT.
"""

from __future__ import annotations

from typing import ClassVar

from services.ha.group_transfer import GroupTransferService
from services.ha.master import HAService
from storage import PutStatus, StoreNotWriteableError


class NotEnoughInSyncReplicasError(StoreNotWriteableError):
    """Fewer replicas are in sync than ``min_in_sync_replicas``: the put was refused before
    anything was stored (RocketMQ's IN_SYNC_REPLICAS_NOT_ENOUGH).

    A refusal of the store's kind, so that every caller that retries a refused put later
    (delayed and timer delivery, revive) retries this one too.
    """

    code: ClassVar[str] = "NOT_ENOUGH_IN_SYNC_REPLICAS"


class MasterReplication:
    """A :class:`services.appender.ReplicationHook` for one HA service.

    ``async`` replication confirms at once (the master's own flush was enough); ``sync``
    waits for the in-sync slaves through the group transfer service.
    """

    def __init__(
        self,
        ha: HAService,
        transfer: GroupTransferService | None,
        min_in_sync_replicas: int = 1,
    ) -> None:
        self._ha = ha
        self._transfer = transfer
        self.min_in_sync_replicas = min_in_sync_replicas

    @property
    def in_sync_replicas(self) -> int:
        """This master and the slaves of its sync-state set."""
        return 1 + len(self._ha.sync_state_set)

    def admit(self) -> None:
        """Before an append: NotEnoughInSyncReplicasError while too few replicas are in sync."""
        in_sync = self.in_sync_replicas
        if in_sync < self.min_in_sync_replicas:
            raise NotEnoughInSyncReplicasError(
                f"{in_sync} of the {self.min_in_sync_replicas} in-sync replicas this master "
                "needs (min_in_sync_replicas, itself included); nothing was stored: retry "
                "once a slave has caught up"
            )

    def appended(self, end_offset: int, store_timestamp: int) -> None:
        self._ha.appended(end_offset, store_timestamp)

    async def confirm(self, end_offset: int) -> PutStatus:
        if self._transfer is None:
            return PutStatus.PUT_OK
        return await self._transfer.wait(end_offset)

    def close(self) -> None:
        if self._transfer is not None:
            self._transfer.close()

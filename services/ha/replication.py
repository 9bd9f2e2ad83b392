"""The master's side of the put path: wake the HA connections, confirm per the mode."""

from __future__ import annotations

from services.ha.group_transfer import GroupTransferService
from services.ha.master import HAService
from storage import PutStatus


class MasterReplication:
    """A :class:`services.appender.ReplicationHook` for one HA service.

    ``async`` replication confirms at once (the master's own flush was enough); ``sync``
    waits for the in-sync slaves through the group transfer service.
    """

    def __init__(self, ha: HAService, transfer: GroupTransferService | None) -> None:
        self._ha = ha
        self._transfer = transfer

    def appended(self, end_offset: int, store_timestamp: int) -> None:
        self._ha.appended(end_offset, store_timestamp)

    async def confirm(self, end_offset: int) -> PutStatus:
        if self._transfer is None:
            return PutStatus.PUT_OK
        return await self._transfer.wait(end_offset)

    def close(self) -> None:
        if self._transfer is not None:
            self._transfer.close()

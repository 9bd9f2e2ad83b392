"""Op records, batched: many ended halves share one record of the op topic.

RocketMQ (``TransactionalOpBatchService``) gathers ended half offsets and writes one op
record when they reach ``transactionOpMsgMaxSize`` (4096 bytes) or every
``transactionOpBatchInterval`` (3 s): its end-transaction call is one-way, nobody waits.
Here an end is answered only once its op record is durable (a second end after a crash must
find it), so the batch closes the way a group commit does: the ends that arrive while an op
record is being written go into the next one, at most ``max_size`` bytes of offsets per
record, one record per outcome. Each end hears the status of its record's put (PUT_OK, or
what replication could not confirm: :meth:`TransactionService.end` decides what it may
answer).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final

from services.appender import PutMessages
from services.transaction.records import OFFSET_SEPARATOR, op_message
from storage import PutStatus

DEFAULT_OP_MAX_SIZE: Final = 4096


@dataclass(slots=True)
class _Batch:
    offsets: list[int] = field(default_factory=list)
    size: int = 0
    waiters: list[asyncio.Future[PutStatus]] = field(default_factory=list)
    """One future per end: a cancelled end cancels its own only, and the write wakes every
    end directly (no shield, one turn of the loop fewer)."""


class OpWriter:
    """Writes the op records of ended halves, batched (the event loop's)."""

    def __init__(self, put: PutMessages, max_size: int = DEFAULT_OP_MAX_SIZE) -> None:
        self._put = put
        self._max_size = max_size
        self._pending: dict[str, list[_Batch]] = {}
        self._writer: asyncio.Task[None] | None = None

    async def end(self, half_offset: int, outcome: str) -> PutStatus:
        """Return once an op record holding ``half_offset`` with ``outcome`` is stored and
        its put answered: that put's status."""
        batches = self._pending.setdefault(outcome, [])
        entry = len(f"{half_offset}{OFFSET_SEPARATOR}")
        if not batches or batches[-1].size + entry > self._max_size:
            batches.append(_Batch())
        batch = batches[-1]
        batch.offsets.append(half_offset)
        batch.size += entry
        done: asyncio.Future[PutStatus] = asyncio.get_running_loop().create_future()
        batch.waiters.append(done)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name="transaction-op-writer")
        return await done

    async def _drain(self) -> None:
        while self._pending:
            outcome = next(iter(self._pending))
            batches = self._pending[outcome]
            batch = batches.pop(0)
            if not batches:
                del self._pending[outcome]
            try:
                written = await self._put([op_message(batch.offsets, outcome)])
            except Exception as exc:  # every waiter hears of it
                for done in batch.waiters:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for done in batch.waiters:
                if not done.done():
                    done.set_result(written.status)

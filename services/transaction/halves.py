"""Half messages that arrive together, appended as one batch.

Every half goes to queue 0 of ``RMQ_SYS_TRANS_HALF_TOPIC``, so the halves of concurrent
sends can share one append (one encode loop, one CommitLog write, one ConsumeQueue write),
the way a group commit shares a flush: the halves that arrive while one batch is being
written go into the next. Each send is answered with its own record's put; the records are
the ones a put of each would have written, except that a batch shares one store time.

A batch refused before anything was written (one half too large, say) is put again half by
half, so that each send hears of its own refusal only; any other failure reaches every send
of the batch, as it would have reached each alone.
"""

from __future__ import annotations

import asyncio
from typing import Final

from services.appender import PutMessages
from storage import Message, PutResult
from storage.errors import MessageRejectedError

MAX_BATCH: Final = 128
"""Halves in one append at most."""

_Pending = tuple[Message, "asyncio.Future[PutResult]"]


class HalfAppender:
    """Appends half messages, batched (the event loop's)."""

    def __init__(self, put: PutMessages, max_batch: int = MAX_BATCH) -> None:
        self._put = put
        self._max_batch = max_batch
        self._pending: list[_Pending] = []
        self._writer: asyncio.Task[None] | None = None

    async def put(self, half: Message) -> PutResult:
        """Return once ``half`` is stored (durable as the flush mode says)."""
        done: asyncio.Future[PutResult] = asyncio.get_running_loop().create_future()
        self._pending.append((half, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain(), name="transaction-half-writer")
        return await done

    async def _drain(self) -> None:
        while self._pending:
            pending = self._pending
            batch = [p for p in pending[: self._max_batch] if not p[1].done()]
            self._pending = pending[self._max_batch :]
            if batch:
                await self._write(batch)

    async def _write(self, batch: list[_Pending]) -> None:
        try:
            results = await self._put([half for half, _ in batch])
        except MessageRejectedError as exc:
            if len(batch) == 1:
                _fail(batch, exc)
                return
            for one in batch:  # nothing was written: each alone, for its own answer
                await self._write([one])
            return
        except Exception as exc:
            _fail(batch, exc)
            return
        for (_, done), result in zip(batch, results, strict=True):
            if not done.done():
                done.set_result(result)


def _fail(batch: list[_Pending], exc: Exception) -> None:
    for _, done in batch:
        if not done.done():
            done.set_exception(exc)

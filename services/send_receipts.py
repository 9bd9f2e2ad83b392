"""What a send answers: a receipt per message (:class:`SendReceipt`), or, for a batch of
bodies alone, the same as columns (:class:`SentBodies`)."""

from __future__ import annotations

from typing import NamedTuple

from storage import BatchPut


class SentBodies(NamedTuple):
    """Where a batch of bodies alone went (:meth:`SendService.send_bodies`), as columns."""

    topic: str
    put: BatchPut
    uniq_keys: list[str]
    status: str  # one for the batch

    def receipts(self) -> list[SendReceipt]:
        """The receipts :meth:`SendService.send` answers for the same batch."""
        put = self.put
        queue_offsets = range(put.first_queue_offset, put.first_queue_offset + len(put.offsets))
        return [
            SendReceipt(msg_id, uniq_key, self.topic, put.queue_id, queue_offset, offset,
                        put.store_timestamp, self.status)
            for msg_id, uniq_key, queue_offset, offset in zip(
                put.msg_ids(), self.uniq_keys, queue_offsets, put.offsets, strict=True
            )
        ]  # fmt: skip


class SendReceipt(NamedTuple):
    """Where one sent message went."""

    msg_id: str  # offsetMsgId: store host + port + commit log offset
    uniq_key: str  # the client-style id (UNIQ_KEY property)
    topic: str
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    store_timestamp: int
    status: str = "PUT_OK"  # or FLUSH_DISK_TIMEOUT: stored, not yet confirmed on disk
    delay_level: int = 0
    deliver_at: int | None = None  # delayed and timer messages: when they become visible (ms)
    replayed: bool = False  # an earlier send with the same idempotency key stored it
    timer_handle: str | None = None  # a timer message: what cancels it

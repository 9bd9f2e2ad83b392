"""What a send answers: a receipt per message (:class:`Sent` of :class:`SendReceipt`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, overload

from storage import Appended


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


class Sent(Sequence[SendReceipt]):
    """The receipts of one send. Those of messages stored where they were sent (neither
    delayed nor timed: the common send) are the put's columns and the UNIQ_KEYs
    (:attr:`appended`, :attr:`uniq_keys`), a receipt made when asked for; any other send's
    are listed (:attr:`listed`)."""

    __slots__ = ("appended", "listed", "topic", "uniq_keys")

    def __init__(
        self,
        topic: str,
        *,
        appended: Appended | None = None,
        uniq_keys: list[str] | None = None,
        listed: list[SendReceipt] | None = None,
    ) -> None:
        if (listed is None) == (appended is None or uniq_keys is None):
            raise ValueError("a send's receipts are its put's columns, or listed")
        self.topic = topic
        self.appended = appended
        self.uniq_keys = uniq_keys
        self.listed = listed

    @property
    def replayed(self) -> bool:
        """Whether an earlier send with the same idempotency key stored them."""
        return self.listed is not None and bool(self.listed) and self.listed[0].replayed

    def __len__(self) -> int:
        return len(self.listed) if self.listed is not None else len(self.uniq_keys or ())

    def __iter__(self) -> Iterator[SendReceipt]:
        if self.listed is not None:
            return iter(self.listed)
        appended, uniq_keys = self.appended, self.uniq_keys
        assert appended is not None and uniq_keys is not None
        topic, queue_id, stored_at = self.topic, appended.queue_id, appended.store_timestamp
        status, first = appended.status.value, appended.first_queue_offset
        receipts = [
            SendReceipt(msg_id, key, topic, queue_id, first + number, offset, stored_at, status)
            for number, (msg_id, key, offset) in enumerate(
                zip(appended.msg_ids(), uniq_keys, appended.offsets, strict=True)
            )
        ]
        return iter(receipts)

    @overload
    def __getitem__(self, index: int) -> SendReceipt: ...
    @overload
    def __getitem__(self, index: slice) -> list[SendReceipt]: ...
    def __getitem__(self, index: int | slice) -> SendReceipt | list[SendReceipt]:
        if self.listed is not None:
            return self.listed[index]
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        appended, uniq_keys = self.appended, self.uniq_keys
        assert appended is not None and uniq_keys is not None
        result = appended[index]
        return SendReceipt(
            result.msg_id,
            uniq_keys[index],
            self.topic,
            result.queue_id,
            result.queue_offset,
            result.physical_offset,
            result.store_timestamp,
            result.status.value,
        )

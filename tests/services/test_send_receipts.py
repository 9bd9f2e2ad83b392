"""What a send answers (``services.send_receipts``): its receipts, as the put's columns or
listed, read the same way."""

from __future__ import annotations

import pytest

from services.send_receipts import SendReceipt, Sent
from storage import Appended, PutStatus


def test_columns_read_as_one_receipt_per_message() -> None:
    put = Appended(
        "7F00000100002A9F", "T", 3, 10, [64, 200], [136, 100], 1_700_000_000_000,
        PutStatus.FLUSH_DISK_TIMEOUT,
    )  # fmt: skip
    sent = Sent("T", appended=put, uniq_keys=["A" * 32, "B" * 32])
    assert put.msg_ids() == ["7F00000100002A9F0000000000000040", "7F00000100002A9F00000000000000C8"]
    assert put.end_offset == 300
    status = "FLUSH_DISK_TIMEOUT"
    assert list(sent) == [
        SendReceipt(put.msg_ids()[0], "A" * 32, "T", 3, 10, 64, 1_700_000_000_000, status),
        SendReceipt(put.msg_ids()[1], "B" * 32, "T", 3, 11, 200, 1_700_000_000_000, status),
    ]
    assert sent[-1] == sent[1] and sent[:1] == [sent[0]]
    assert not sent.replayed


def test_listed_receipts_are_read_as_they_are() -> None:
    receipts = [SendReceipt("id", "key", "T", 0, -1, 7, 1, delay_level=2, replayed=True)]
    sent = Sent("T", listed=receipts)
    assert list(sent) == receipts and len(sent) == 1
    assert sent.replayed


def test_receipts_are_columns_or_listed_not_both() -> None:
    put = Appended("P", "T", 0, 0, [0], [10], 1)
    with pytest.raises(ValueError):
        Sent("T")
    with pytest.raises(ValueError):
        Sent("T", appended=put, uniq_keys=["k"], listed=[])


def test_a_receipt_defaults_to_a_plain_stored_message() -> None:
    receipt = SendReceipt("id", "key", "T", 0, 0, 0, 0)
    assert (receipt.status, receipt.delay_level, receipt.deliver_at, receipt.replayed) == (
        "PUT_OK",
        0,
        None,
        False,
    )
    assert receipt.timer_handle is None

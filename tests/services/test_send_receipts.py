"""What a send answers: a batch of bodies alone as columns reads as the receipts of each
message (the equality with the general way's receipts: tests/services/test_send_lean.py)."""

from __future__ import annotations

from services.send_receipts import SendReceipt, SentBodies
from storage import BatchPut


def test_columns_read_as_one_receipt_per_message() -> None:
    put = BatchPut("7F00000100002A9F", "T", 3, 10, [64, 200], 1_700_000_000_000, 300)
    sent = SentBodies("T", put, ["A" * 32, "B" * 32], "FLUSH_DISK_TIMEOUT")
    assert put.msg_ids() == ["7F00000100002A9F0000000000000040", "7F00000100002A9F00000000000000C8"]
    assert sent.receipts() == [
        SendReceipt(put.msg_ids()[0], "A" * 32, "T", 3, 10, 64, 1_700_000_000_000, sent.status),
        SendReceipt(put.msg_ids()[1], "B" * 32, "T", 3, 11, 200, 1_700_000_000_000, sent.status),
    ]


def test_a_receipt_defaults_to_a_plain_stored_message() -> None:
    receipt = SendReceipt("id", "key", "T", 0, 0, 0, 0)
    assert (receipt.status, receipt.delay_level, receipt.deliver_at, receipt.replayed) == (
        "PUT_OK",
        0,
        None,
        False,
    )
    assert receipt.timer_handle is None

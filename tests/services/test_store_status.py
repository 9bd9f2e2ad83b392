"""Store status: CommitLog positions, flush lag, writeability and disk use, as the overview,
/readyz and /metrics read them."""

from __future__ import annotations

from services import Broker, OutgoingMessage


async def test_gauges_follow_the_store(broker: Broker) -> None:
    before = broker.store_gauges()
    assert (before.commit_log_min_offset, before.commit_log_max_offset) == (0, 0)
    assert before.writeable and before.not_writeable_reason == ""
    assert before.flush_mode == "ASYNC_FLUSH"
    [sent] = await broker.send.send("Gauged", [OutgoingMessage(b"x" * 100, queue_id=0)])
    after = broker.store_gauges()
    record = broker.messages.by_id(sent.msg_id)
    assert after.commit_log_max_offset == sent.commit_log_offset + record.size > 100
    assert after.flush_lag_bytes == after.commit_log_max_offset - after.flushed_offset
    assert after.dispatch_behind_bytes == 0, "dispatched right after the append"
    assert broker.store_status.disk_used_bytes() > 0

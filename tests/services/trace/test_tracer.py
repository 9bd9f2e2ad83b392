"""The tracer's hooks in a running broker: what each step writes, and what an untraced topic
does not even build."""

from __future__ import annotations

from pathlib import Path

from services import Broker, BrokerConfig, OffsetCommit, OutgoingMessage, PullOptions
from services.pop.service import ReceiveOptions
from services.trace.events import Consumer, TraceEvent
from services.trace.tracer import CURRENT_CONSUMER, Tracer
from storage.topic_names import TRACE_TOPIC
from tests.services.conftest import SMALL, wait_for
from tests.services.trace.conftest import events_of, send_one


def kinds(events: list[TraceEvent]) -> list[tuple[str, str | None, int | None]]:
    return [(e.type, e.group, e.attempt) for e in events]


async def test_a_pull_is_a_delivery_once_a_commit_covers_it(traced: Broker) -> None:
    msg_id = await send_one(traced, "T", keys=["k1"])
    CURRENT_CONSUMER.set(lambda: Consumer("alice", "10.0.0.1:4000", "w1"))
    pulled = await traced.pull.pull_group("g", "T", PullOptions())
    assert len(pulled.messages) == 1
    await wait_for(lambda: traced.metrics.trace_events_written >= 1)
    assert kinds(traced.services.trace.timeline(msg_id).events) == [("stored", None, None)]
    await traced.offsets.commit("g", [OffsetCommit("T", 0, 1)])
    events = await events_of(traced, msg_id, 3)
    assert kinds(events) == [("stored", None, None), ("delivered", "g", 1), ("acked", "g", 1)]
    delivered, acked = events[1], events[2]
    assert delivered.consumer == Consumer("alice", "10.0.0.1:4000", "w1")
    assert delivered.detail == {"via": "pull", "delivered_at": delivered.at}
    assert acked.at >= delivered.at
    assert events[0].detail["keys"] == ["k1"]


async def test_a_commit_over_messages_never_pulled_reads_them(traced: Broker) -> None:
    ids = [await send_one(traced, "T") for _ in range(3)]
    CURRENT_CONSUMER.set(None)
    await traced.offsets.commit("g", [OffsetCommit("T", 0, 3)])
    for msg_id in ids:
        events = await events_of(traced, msg_id, 3)
        assert kinds(events)[1:] == [("delivered", "g", 1), ("acked", "g", 1)]
        assert events[1].detail["delivered_at"] == events[2].at  # the commit's time
        assert events[1].consumer is None


async def test_a_changed_invisibility_keeps_one_delivery_then_its_ack(traced: Broker) -> None:
    msg_id = await send_one(traced, "T")
    options = ReceiveOptions(max_messages=1, invisible_ms=60_000)
    [taken] = (await traced.pop.receive("p", "T", options)).messages
    change = await traced.pop.change_invisibility("p", taken.receipt_handle, 30_000)
    assert change.receipt_handle is not None
    await traced.pop.ack("p", [change.receipt_handle])
    events = await events_of(traced, msg_id, 4)
    assert kinds(events) == [
        ("stored", None, None),
        ("delivered", "p", 1),
        ("invisibility_changed", "p", 1),
        ("acked", "p", 1),
    ]
    assert events[2].detail["invisible_ms"] == 30_000


async def test_an_expired_delivery_is_revived(traced: Broker) -> None:
    msg_id = await send_one(traced, "T")
    options = ReceiveOptions(max_messages=1, invisible_ms=200)
    [_] = (await traced.pop.receive("p", "T", options)).messages
    events = await events_of(traced, msg_id, 3)
    assert kinds(events) == [("stored", None, None), ("delivered", "p", 1), ("revived", "p", 1)]


async def test_an_untraced_topic_builds_nothing(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(tmp_path / "store", SMALL))  # trace off by default
    await broker.start()
    try:
        await broker.send.send("T", [OutgoingMessage(b"x", queue_id=0)])
        await broker.pull.pull_group("g", "T", PullOptions())
        await broker.offsets.commit("g", [OffsetCommit("T", 0, 1)])
        writer = broker.services.tracer.writer
        assert writer is not None
        assert writer.waiting == 0
        assert broker.services.tracer.recent.lowest(("g", "T", 0)) is None
        assert broker.metrics.trace_events_written == 0
    finally:
        await broker.stop()


async def test_sampling_traces_a_message_whole_or_not_at_all(tmp_path: Path) -> None:
    config = BrokerConfig(tmp_path / "store", SMALL, trace=True, trace_sample_rate=0.5)
    broker = Broker(config)
    await broker.start()
    try:
        sent = await broker.send.send("T", [OutgoingMessage(b"x")] * 40, batch_queue_id=0)
        await broker.offsets.commit("g", [OffsetCommit("T", 0, 40)])
        switch = broker.services.tracer.switch
        traced = [r.uniq_key for r in sent if switch.sampled(r.uniq_key)]
        assert 0 < len(traced) < 40
        await wait_for(lambda: broker.metrics.trace_events_written == 3 * len(traced))
        for receipt in sent:
            timeline = broker.services.trace.timeline(receipt.uniq_key)
            expected = 3 if receipt.uniq_key in traced else 0
            assert len(timeline.events) == expected
            assert timeline.tracing == ("on" if expected else "sampled_out")
    finally:
        await broker.stop()


def test_an_off_tracer_has_no_writer() -> None:
    off = Tracer.off()
    assert off.writer is None
    assert not off.topic_on("T")
    assert TRACE_TOPIC == "RMQ_SYS_TRACE_TOPIC"

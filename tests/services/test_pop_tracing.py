"""What POP tells the message trace: the in-flight entries of an ack batch, read before the
acks take them out of flight, for traced topics only."""

from __future__ import annotations

from pathlib import Path

from services import Broker, BrokerConfig, OutgoingMessage, TopicConfig
from services.pop.service import ReceiveOptions
from services.pop.tracing import in_flight_of, trace_outcome
from tests.services.conftest import SMALL


async def test_only_traced_topics_entries_are_read_and_told(tmp_path: Path) -> None:
    broker = Broker(BrokerConfig(tmp_path / "store", SMALL))
    await broker.start()
    try:
        await broker.topics.put("Traced", read_queue_nums=1, write_queue_nums=1, perm=6, trace=True)
        await broker.topics.put("Plain", read_queue_nums=1, write_queue_nums=1, perm=6)
        assert broker.topics.get("Traced") == TopicConfig("Traced", 1, 1, trace=True)
        pending = {}
        for topic in ("Traced", "Plain"):
            await broker.send.send(topic, [OutgoingMessage(b"x", queue_id=0)])
            options = ReceiveOptions(max_messages=1, invisible_ms=60_000)
            [taken] = (await broker.pop.receive("g", topic, options)).messages
            handle = broker.pop.codec.decode(taken.receipt_handle)
            pending[(("g", topic, 0), handle.ck_id)] = [0]
        tracer = broker.services.tracer
        found = in_flight_of(tracer, broker.pop.table, pending)
        assert list(found) == [("g", "Traced", 0)]
        [(ck_id, entry)] = found[("g", "Traced", 0)]
        assert (entry.offset, entry.attempt) == (0, 1)
        writer = tracer.writer
        assert writer is not None
        waiting = writer.waiting
        trace_outcome(tracer, "acked", ("g", "Plain", 0), [(ck_id, entry)], 1)
        assert writer.waiting == waiting
        trace_outcome(tracer, "acked", ("g", "Traced", 0), [(ck_id, entry)], 1)
        assert writer.waiting == waiting + 2  # a delivered and the outcome, made later
    finally:
        await broker.stop()

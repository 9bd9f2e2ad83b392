"""The trace writer: batches stored in the background, a full queue or a refusing store
dropped and counted, what waits at stop stored."""

from __future__ import annotations

import orjson

from services.metrics import Metrics
from services.trace.events import TraceEvent
from services.trace.writer import TraceWriter
from storage.config_managers import TopicConfig
from storage.topic_names import TRACE_TOPIC
from tests.services.conftest import World, wait_for


class Topics:
    """The topic configs the writer made (TopicService.ensure's part)."""

    def __init__(self) -> None:
        self.made: list[TopicConfig] = []

    async def ensure(self, config: TopicConfig) -> None:
        if config not in self.made:
            self.made.append(config)


def stored_events(world: World) -> list[str]:
    store = world.store
    result = store.get_message("reader", TRACE_TOPIC, 0, 0, 64)
    return [e["msg_id"] for m in result.messages for e in orjson.loads(m.body)["events"]]


def batch(*ids: str) -> list[TraceEvent]:
    return [TraceEvent("stored", 1, msg_id, "T") for msg_id in ids]


async def test_offered_batches_are_stored_one_record_each(world: World) -> None:
    metrics, topics = Metrics(), Topics()
    writer = TraceWriter(world.put, metrics, topics.ensure)
    writer.start()
    try:
        writer.offer(batch("A", "B"))
        writer.offer(lambda: batch("C"), size=1)  # made in the writer's task
        await wait_for(lambda: metrics.trace_events_written == 3)
    finally:
        await writer.stop()
    assert stored_events(world) == ["A", "B", "C"]
    assert world.store.max_offset_in_queue(TRACE_TOPIC, 0) == 2
    assert writer.waiting == 0
    # one queue, its config made with the first record: readable over HTTP as any topic
    assert [(c.topic_name, c.read_queue_nums, c.is_readable) for c in topics.made] == [
        (TRACE_TOPIC, 1, True)
    ]


async def test_a_full_queue_drops_and_counts(world: World) -> None:
    metrics = Metrics()
    writer = TraceWriter(
        world.put, metrics, Topics().ensure, capacity=2
    )  # not started: nothing drains
    writer.offer(batch("A", "B"))
    writer.offer(batch("C"))
    assert metrics.trace_events_dropped["queue_full"] == 1
    await writer.stop()  # stores what waits
    assert stored_events(world) == ["A", "B"]


async def test_a_store_that_refuses_drops_and_counts_and_nothing_is_retried(world: World) -> None:
    metrics = Metrics()
    writer = TraceWriter(world.put, metrics, Topics().ensure)
    world.store.mark_not_writeable("a test refuses writes")
    writer.offer(batch("A"))

    def failing() -> list[TraceEvent]:
        raise ValueError("cannot make these")

    writer.offer(failing, size=4)
    await writer.write_pending()
    assert metrics.trace_events_dropped["not_stored"] == 5
    world.store.mark_writeable()
    await writer.write_pending()
    assert stored_events(world) == []
    assert metrics.trace_events_written == 0

"""The timer wheel's puts, traced: a message put into its topic at its time is a
``timer_fired``; a stored cancel marker a ``timer_cancelled``."""

from __future__ import annotations

import time

from services import Broker, OutgoingMessage
from tests.services.trace.conftest import events_of


async def test_a_timer_message_is_scheduled_then_fired_into_its_topic(traced: Broker) -> None:
    due = time.time_ns() // 1_000_000 + 300
    sent = await traced.send.send("T", [OutgoingMessage(b"x", queue_id=0, deliver_at=due)])
    events = await events_of(traced, sent[0].uniq_key, 2)
    assert [e.type for e in events] == ["timer_scheduled", "timer_fired"]
    scheduled, fired = events
    assert scheduled.detail["deliver_at"] == due
    assert (fired.topic, fired.queue_id, fired.queue_offset) == ("T", 0, 0)
    assert fired.at >= due


async def test_a_cancelled_timer_message_shows_its_cancel(traced: Broker) -> None:
    later = OutgoingMessage(b"x", queue_id=0, deliver_after_ms=600_000)
    [receipt] = await traced.send.send("T", [later])
    assert receipt.timer_handle is not None
    await traced.timers.cancel("T", receipt.timer_handle)
    events = await events_of(traced, receipt.uniq_key, 2)
    assert [e.type for e in events] == ["timer_scheduled", "timer_cancelled"]
    precision = traced.timers.precision_ms  # the marker names the slot the message is due in
    assert receipt.deliver_at is not None
    assert receipt.deliver_at - precision < events[1].detail["deliver_at"] <= receipt.deliver_at

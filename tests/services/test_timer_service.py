"""The timer wheel service on a real store: messages fire in time order and never before they
are due, far ones roll, cancels win until the slot is decided, and a restart loses nothing and
delivers nothing twice."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.appender import Appender
from services.durability import DurabilityTracker
from services.errors import (
    InvalidTimerHandleError,
    TimerAlreadyDeliveredError,
    TimerNotFoundError,
)
from services.idempotency import IdempotencyService, repost_key_at
from services.timer.handles import TimerHandle, decode_handle
from services.timer.progress_file import MasterTimerProgress, save_progress
from services.timer.recall import CancelOutcome
from services.timer.service import TimerService
from storage import Message, MessageStore, StoreConfig, StoredMessage
from storage.record.properties import PROPERTY_IDEMPOTENCY_KEY
from storage.timer import TIMER_TOPIC, TimerConfig
from tests.services.conftest import wait_for

TIMER = TimerConfig(precision_ms=100, slots_total=600, roll_window_slots=20)  # rolls beyond 2 s
CONFIG = StoreConfig(commit_log_file_size=1024 * 1024, timer=TIMER)


class Wheel:
    """A store, an appender and a running timer service."""

    def __init__(self, root: Path) -> None:
        self.store = MessageStore.open(root, CONFIG)
        self.appender = Appender(self.store, DurabilityTracker(self.store))
        idempotency = IdempotencyService(self.store, self.appender)
        self.service = TimerService(self.store, self.appender.put, idempotency, "broker-a")

    def schedule(self, topic: str, body: bytes, deliver_ms: int, **properties: str) -> str:
        """Put a timer message; its uniq key."""
        uniq = f"U{body.decode()}"
        props = {"TIMER_DELIVER_MS": str(deliver_ms), "UNIQ_KEY": uniq, **properties}
        result = self.store.put([Message(topic, body, queue_id=1, properties=props)])[0]
        assert result.topic == TIMER_TOPIC
        return uniq

    def delivered(self, topic: str) -> list[StoredMessage]:
        found: list[StoredMessage] = []
        while True:  # a pull answers at most 32 messages
            result = self.store.get_message("g", topic, 1, len(found), 1000)
            if not result.messages:
                return found
            found.extend(result.messages)

    async def close(self) -> None:
        await self.service.stop()
        self.store.close()


@pytest.fixture
async def wheel(tmp_path: Path) -> AsyncIterator[Wheel]:
    opened = Wheel(tmp_path)
    await opened.service.start()
    yield opened
    await opened.close()


def now_ms() -> int:
    return int(time.time() * 1000)


async def test_messages_fire_in_time_order_never_before_due(wheel: Wheel) -> None:
    start = now_ms()
    due = {b"c": start + 900, b"a": start + 300, b"b": start + 600}
    for body, at in due.items():
        wheel.schedule("Orders", body, at, TAGS="T", color="red")
    assert wheel.delivered("Orders") == [], "invisible in the real topic until due"
    await wait_for(lambda: len(wheel.delivered("Orders")) == 3)
    delivered = wheel.delivered("Orders")
    assert [m.body for m in delivered] == [b"a", b"b", b"c"]
    for message in delivered:
        assert message.store_timestamp >= due[message.body], "not before it is due"
        assert message.queue_id == 1
        assert message.tags == "T"
        assert message.properties["color"] == "red"
        assert "REAL_TOPIC" not in message.properties
    assert wheel.service.stats.delivered == 3


async def test_a_message_beyond_the_roll_window_rolls_and_then_fires(wheel: Wheel) -> None:
    at = now_ms() + 2600  # the roll window is 2 s
    wheel.schedule("Later", b"far", at)
    await wait_for(lambda: wheel.service.stats.rolled >= 1, within=5)
    assert wheel.delivered("Later") == []
    await wait_for(lambda: len(wheel.delivered("Later")) == 1, within=5)
    [message] = wheel.delivered("Later")
    assert message.store_timestamp >= at
    assert int(message.properties["TIMER_ROLL_TIMES"]) >= 1


async def test_cancel_before_due_wins_and_after_delivery_says_so(wheel: Wheel) -> None:
    service = wheel.service
    at = now_ms() + 700
    doomed = wheel.schedule("Orders", b"doomed", at)
    kept = wheel.schedule("Orders", b"kept", at)
    handle = service.handle_for("Orders", _fire(at), doomed)
    assert (await service.cancel("Orders", handle)).outcome is CancelOutcome.CANCELLED
    assert (await service.cancel("Orders", handle)).outcome is CancelOutcome.ALREADY_CANCELLED
    assert service.stats.cancels_accepted == 1, "answered once; the repeat is not counted"
    await wait_for(lambda: len(wheel.delivered("Orders")) == 1)
    await asyncio.sleep(0.3)  # a slot or three later: still only the one
    assert [m.body for m in wheel.delivered("Orders")] == [b"kept"]
    assert service.stats.cancelled == 1
    assert service.stats.cancelled_by_topic == {"Orders": 1}
    assert service.stats.delivered_by_topic == {"Orders": 1}
    with pytest.raises(TimerAlreadyDeliveredError):
        await service.cancel("Orders", service.handle_for("Orders", _fire(at), kept))


async def test_cancel_refuses_handles_it_cannot_honour(wheel: Wheel) -> None:
    service = wheel.service
    at = now_ms() + 5000
    uniq = wheel.schedule("Orders", b"x", at)
    with pytest.raises(InvalidTimerHandleError):
        await service.cancel("Orders", "not a handle!")
    with pytest.raises(InvalidTimerHandleError, match="topic"):
        await service.cancel("Other", service.handle_for("Orders", _fire(at), uniq))
    with pytest.raises(TimerNotFoundError):
        await service.cancel("Orders", service.handle_for("Orders", _fire(at), "NOPE"))
    with pytest.raises(TimerNotFoundError):  # another group's handle, no such message here
        await service.cancel("Orders", TimerHandle("Orders", "g2", at, "NOPE").encode())
    assert decode_handle(service.handle_for("Orders", 1000, uniq)).deliver_ms == 1001


async def test_a_restart_with_messages_waiting_delivers_each_once(tmp_path: Path) -> None:
    first = Wheel(tmp_path)
    await first.service.start()
    start = now_ms()
    for number in range(40):
        first.schedule("Orders", f"m{number:02d}".encode(), start + 200 + number * 25)
    await wait_for(lambda: len(first.delivered("Orders")) >= 5)
    await first.close()  # some fired, the rest wait in the wheel

    second = Wheel(tmp_path)
    await second.service.start()
    try:
        await wait_for(lambda: len(second.delivered("Orders")) >= 40)
        await asyncio.sleep(0.3)
        bodies = [m.body for m in second.delivered("Orders")]
        assert sorted(bodies) == [f"m{n:02d}".encode() for n in range(40)], "each exactly once"
    finally:
        await second.close()


async def test_after_a_crash_the_wheel_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    first = Wheel(tmp_path)
    await first.service.start()
    at = now_ms() + 1500
    for number in range(10):
        first.schedule("Orders", f"c{number}".encode(), at)
    progress = first.service.progress
    await wait_for(lambda: (p := progress()) is not None and p.enqueue_behind == 0)
    await first.service._stop_loops()  # a crash: no final flush of the timer files
    first.store.close()

    second = Wheel(tmp_path)
    await second.service.start()
    try:
        await wait_for(lambda: len(second.delivered("Orders")) == 10)
        assert all(m.store_timestamp >= at for m in second.delivered("Orders"))
    finally:
        await second.close()


def _fire(deliver_ms: int) -> int:
    out = deliver_ms // 100 * 100
    return out - 100 if out == deliver_ms else out


async def test_a_promoted_slave_rebuilds_the_wheel_from_the_timer_topic(tmp_path: Path) -> None:
    """Timer records replicated but never placed (a slave's store): each is delivered once —
    unless the old master's copy of it is in the log, however long ago it fell due; a record
    the old master rolled is decided by its re-put."""
    wheel = Wheel(tmp_path)
    now = now_ms() // 100 * 100

    def replicated(body: str, out: int, **extra: str) -> int:
        properties = {
            "TIMER_OUT_MS": str(out),
            "REAL_TOPIC": "Orders",
            "REAL_QID": "1",
            "UNIQ_KEY": f"U{body}",
            **extra,
        }
        message = Message(TIMER_TOPIC, body.encode(), properties=properties)
        return wheel.store.put([message])[0].physical_offset

    def copied(source: int, topic: str, body: str, **extra: str) -> int:
        """The old master's copy of the timer record at ``source`` (keyed by it)."""
        properties = {PROPERTY_IDEMPOTENCY_KEY: repost_key_at(source), "UNIQ_KEY": f"U{body}"}
        queue_id = 0 if topic == TIMER_TOPIC else 1
        message = Message(topic, body.encode(), queue_id=queue_id, properties=properties | extra)
        return wheel.store.put([message])[0].physical_offset

    copied(replicated("old-done", now - 600_000), "Orders", "old-done")
    replicated("old-missed", now - 600_000)  # the old master never got to it
    replicated("recent", now - 60_000)

    def rolled(body: str, out: int) -> int:
        """A record the old master rolled: its re-put to the timer topic, one roll more."""
        timed = {"TIMER_OUT_MS": str(out), "REAL_TOPIC": "Orders", "REAL_QID": "1"}
        return copied(replicated(body, out), TIMER_TOPIC, body, TIMER_ROLL_TIMES="1", **timed)

    copied(rolled("rolled-done", now - 600_000), "Orders", "rolled-done")
    rolled("rolled-waiting", now + 500)
    replicated("soon", now + 500)
    before = {m.body for m in wheel.delivered("Orders")}
    await wheel.service.start()
    try:
        expected = [b"old-missed", b"recent", b"rolled-waiting", b"soon"]
        await wait_for(lambda: len(wheel.delivered("Orders")) >= len(before) + len(expected))
        await asyncio.sleep(0.5)
        fired = [m for m in wheel.delivered("Orders") if "TIMER_DEQUEUE_MS" in m.properties]
        assert sorted(m.body for m in fired) == expected
        assert wheel.service.stats.rolled_elsewhere == 2  # both originals of the rolled ones
    finally:
        await wheel.close()


async def crash(wheel: Wheel) -> None:
    """Stop the wheel's tasks and close the store with no final flush of the timer files."""
    await wheel.service._stop_loops()
    wheel.store.close()


async def test_a_cancel_as_its_slot_comes_due_survives_a_crash(tmp_path: Path) -> None:
    """The cancel comes after the delivery time, before the slot fires (it was held in
    memory only): its marker is stored all the same, and the restarted wheel drops the
    message."""
    first = Wheel(tmp_path)
    await first.service.start()
    at = now_ms() + 300
    doomed, _ = first.schedule("Orders", b"doomed", at), first.schedule("Orders", b"kept", at)
    progress = first.service.progress
    await wait_for(lambda: (p := progress()) is not None and p.enqueue_behind == 0)
    await first.service._stop_loops()  # the wheel stalls: the slot does not fire
    await asyncio.sleep(max(0, at - now_ms()) / 1000 + 0.05)
    handle = first.service.handle_for("Orders", _fire(at), doomed)
    assert (await first.service.cancel("Orders", handle)).outcome is CancelOutcome.CANCELLED
    await crash(first)

    second = Wheel(tmp_path)
    await second.service.start()
    try:
        await wait_for(lambda: len(second.delivered("Orders")) >= 1)
        await asyncio.sleep(0.3)
        assert [m.body for m in second.delivered("Orders")] == [b"kept"]
        assert second.service.stats.cancelled == 1
    finally:
        await second.close()


@pytest.mark.parametrize("reached", [True, False], ids=["log-reaches-it", "log-behind"])
async def test_a_promoted_slave_trusts_the_copied_progress_only_when_its_log_reaches_it(
    tmp_path: Path, reached: bool
) -> None:
    """Records due before the master's copied read time count as fired without a look-up —
    when this log holds everything the master had put by then; else each is looked up."""
    wheel = Wheel(tmp_path)
    now = now_ms() // 100 * 100
    for body, out in (("before", now - 60_000), ("after", now - 20_000)):
        properties = {
            "TIMER_OUT_MS": str(out),
            "REAL_TOPIC": "Orders",
            "REAL_QID": "1",
            "UNIQ_KEY": f"U{body}",
        }
        wheel.store.put([Message(TIMER_TOPIC, body.encode(), properties=properties)])
    end = wheel.store.max_physical_offset
    progress = MasterTimerProgress(now - 30_000, end if reached else end + 1)
    save_progress(tmp_path / "config", progress.to_json())
    await wheel.service.start()
    try:
        expected = [b"after"] if reached else [b"after", b"before"]
        await wait_for(lambda: len(wheel.delivered("Orders")) >= len(expected))
        await asyncio.sleep(0.3)
        assert sorted(m.body for m in wheel.delivered("Orders")) == expected
    finally:
        await wheel.close()

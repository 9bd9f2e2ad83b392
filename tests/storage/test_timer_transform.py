"""The put path of timer messages: rounding, precedence, limits, what is left alone, and the
timer topic's ConsumeQueue holding the fire time."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import Message, MessageStore
from storage.errors import TimerMessageIllegalError, TimerNotEnabledError
from storage.timer import TIMER_TOPIC, TimerConfig
from storage.timer.transform import deliver_ms_of, fire_time, redirect_timer
from tests.storage.conftest import TINY_CONFIG

NOW = 1_700_000_000_000
CONFIG = TimerConfig()


def test_a_future_message_moves_to_the_timer_topic_rounded_down() -> None:
    message = Message(
        "Orders", b"x", queue_id=3, properties={"TIMER_DELIVER_MS": str(NOW + 61_500)}
    )
    timed = redirect_timer(message, NOW, CONFIG)
    assert (timed.topic, timed.queue_id) == (TIMER_TOPIC, 0)
    assert timed.properties["TIMER_OUT_MS"] == str(NOW + 61_000)
    assert timed.properties["REAL_TOPIC"] == "Orders"
    assert timed.properties["REAL_QID"] == "3"
    assert fire_time(NOW + 61_000, 1000) == NOW + 60_000, "an exact multiple: one slot earlier"


def test_seconds_win_over_milliseconds_over_an_absolute_time() -> None:
    both = {"TIMER_DELAY_SEC": "2", "TIMER_DELAY_MS": "50", "TIMER_DELIVER_MS": "1"}
    assert deliver_ms_of(both, NOW) == NOW + 2000
    assert deliver_ms_of({"TIMER_DELAY_MS": "50", "TIMER_DELIVER_MS": "1"}, NOW) == NOW + 50
    with pytest.raises(TimerMessageIllegalError):
        deliver_ms_of({"TIMER_DELAY_MS": "soon"}, NOW)


def test_messages_left_alone() -> None:
    due = Message("Orders", b"x", properties={"TIMER_DELIVER_MS": str(NOW - 5)})
    assert redirect_timer(due, NOW, CONFIG) is due
    leveled = Message("Orders", b"x", properties={"DELAY": "3", "TIMER_DELAY_MS": "9000"})
    assert redirect_timer(leveled, NOW, CONFIG).properties == {"DELAY": "3"}
    assert redirect_timer(due, NOW, CONFIG, force=True).topic == TIMER_TOPIC


def test_refusals() -> None:
    too_far = Message("Orders", b"x", properties={"TIMER_DELAY_SEC": str(3 * 86_400 + 1)})
    with pytest.raises(TimerMessageIllegalError, match="at most 259200 s"):
        redirect_timer(too_far, NOW, CONFIG)
    late_cancel = Message(
        "Orders", b"0", properties={"TIMER_DELIVER_MS": str(NOW), "TIMER_DEL_UNIQKEY": "Orders+A"}
    )
    with pytest.raises(TimerMessageIllegalError):
        redirect_timer(late_cancel, NOW, CONFIG)
    with pytest.raises(TimerNotEnabledError):
        redirect_timer(
            Message("Orders", b"x", properties={"TIMER_DELAY_MS": "500"}),
            NOW,
            TimerConfig(enabled=False),
        )


def test_the_timer_queue_holds_fire_times_and_negated_ones_for_cancel_markers(
    tmp_path: Path,
) -> None:
    with MessageStore.open(tmp_path, TINY_CONFIG) as store:
        timed = store.put([Message("Orders", b"x", properties={"TIMER_DELAY_SEC": "60"})])[0]
        marker = store.put(
            [
                Message(
                    "Orders",
                    b"0",
                    properties={"TIMER_DELAY_SEC": "60", "TIMER_DEL_UNIQKEY": "Orders+K"},
                )
            ]
        )[0]
        batch = store.put(
            [
                Message("Orders", b"b", properties={"TIMER_DELAY_MS": "5000"}),
                Message("Orders", b"c"),
            ]
        )
        assert {timed.topic, marker.topic, *(r.topic for r in batch)} == {TIMER_TOPIC}
        queue = store.find_consume_queue(TIMER_TOPIC, 0)
        assert queue is not None
        units = [queue.get_unit(n) for n in range(4)]
        codes = [unit[2] for unit in units if unit is not None]
        stored = store.look_message_by_offset(timed.physical_offset)
        assert stored is not None
        assert codes[0] == int(stored.properties["TIMER_OUT_MS"]) > timed.store_timestamp
        assert codes[1] == -codes[0]
        assert codes[3] <= batch[1].store_timestamp, "the untimed one of a timed batch: due now"
        assert store.max_offset_in_queue("Orders", 0) == 0, "nothing visible in the real topic"

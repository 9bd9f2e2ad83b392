"""delay_levels: the levels, delivery times, and the put path sending DELAY > 0 messages to the
schedule topic (reference §8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage import Message, MessageRejectedError, MessageStore, StoreConfig
from storage.delay_levels import SCHEDULE_TOPIC, deliver_timestamp, parse_delay_levels

CONFIG = StoreConfig(commit_log_file_size=64 * 1024, message_delay_levels="1s 2s 3s")


def test_delayed_message_lands_in_the_schedule_queue_of_its_level(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        result = store.put(
            [Message("Orders", b"later", queue_id=5, properties={"DELAY": "2", "TAGS": "A"})]
        )[0]
        assert (result.topic, result.queue_id) == (SCHEDULE_TOPIC, 1)
        stored = store.look_message_by_id(result.msg_id)
        assert stored is not None
        assert stored.properties["REAL_TOPIC"] == "Orders"
        assert stored.properties["REAL_QID"] == "5"
        assert store.max_offset_in_queue("Orders", 5) == 0
        queue = store.find_consume_queue(SCHEDULE_TOPIC, 1)
        assert queue is not None
        unit = queue.get_unit(0)
        assert unit is not None
        assert unit[2] == result.store_timestamp + 2000, "tags code is the delivery time"


def test_levels_above_the_table_are_clamped(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        result = store.put([Message("Orders", b"x", properties={"DELAY": "40"})])[0]
        assert result.queue_id == 2
        stored = store.look_message_by_id(result.msg_id)
        assert stored is not None and stored.properties["DELAY"] == "3"


@pytest.mark.parametrize("delay", ["0", "-1"])
def test_non_positive_levels_are_not_delayed(tmp_path: Path, delay: str) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        result = store.put([Message("Orders", b"x", properties={"DELAY": delay})])[0]
        assert result.topic == "Orders"


def test_delayed_batches_and_bad_levels_are_refused(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        with pytest.raises(MessageRejectedError, match="batch"):
            store.put([Message("T", b"a", properties={"DELAY": "1"})] * 2)
        with pytest.raises(MessageRejectedError, match="delay level"):
            store.put([Message("T", b"a", properties={"DELAY": "soon"})])
        assert store.commit_log.max_offset == 0


def test_delivery_time_of_unknown_level_is_one_second() -> None:
    levels = parse_delay_levels("5s 8s")
    assert deliver_timestamp(levels, 2, 1000) == 9000
    assert deliver_timestamp(levels, 9, 999) == 1999
    with pytest.raises(ValueError, match="bad delay level"):
        parse_delay_levels("5x")


@pytest.mark.parametrize(
    "field, value",
    [
        pytest.param("flag", 2**31, id="flag"),
        pytest.param("reconsume_times", -(2**31) - 1, id="reconsume-times"),
        pytest.param("born_timestamp", 2**63, id="born-timestamp"),
        pytest.param("born_host", ("127.0.0.1", 2**32), id="born-port"),
    ],
)
def test_out_of_range_numbers_are_refused_before_anything_is_written(
    tmp_path: Path, field: str, value: object
) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        store.put([Message("T", b"first")])
        before = store.commit_log.max_offset
        message = Message("T", b"x", **{field: value})  # type: ignore[arg-type]
        with pytest.raises(MessageRejectedError, match="out of range"):
            store.put([message])
        assert store.commit_log.max_offset == before
        assert store.put([Message("T", b"after")])[0].queue_offset == 1


def test_a_batch_with_an_out_of_range_field_writes_none_of_its_messages(tmp_path: Path) -> None:
    with MessageStore.open(tmp_path, CONFIG) as store:
        before = store.commit_log.max_offset
        batch = [Message("T", b"ok"), Message("T", b"bad", flag=2**40)]
        with pytest.raises(MessageRejectedError, match="out of range"):
            store.put(batch)
        assert store.commit_log.max_offset == before
        assert store.max_offset_in_queue("T", 0) == 0

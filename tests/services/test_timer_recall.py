"""Cancel markers and the look-up of the record a handle names, on a real store: the marker
is a timer-topic record timed for its target's slot, and it is found next to its target."""

from __future__ import annotations

import time
from pathlib import Path

from services.timer.handles import TimerHandle
from services.timer.recall import RECALL_TAG, cancel_marker, find_timer_record
from storage import Message, MessageStore, StoreConfig
from storage.timer import TIMER_TOPIC, cancel_key, timer_tags_code


def test_a_marker_is_timed_for_its_targets_slot_even_when_that_slot_is_due(
    tmp_path: Path,
) -> None:
    store = MessageStore.open(tmp_path, StoreConfig(commit_log_file_size=1024 * 1024))
    try:
        due = int(time.time() * 1000) + 60_000
        target = Message("Orders", b"x", properties={"TIMER_DELIVER_MS": str(due)})
        target.properties["UNIQ_KEY"] = "K1"
        stored = store.put([target])[0]
        assert stored.topic == TIMER_TOPIC
        assert find_timer_record(store, "Orders", "K1")[1] is False

        handle = TimerHandle("Orders", "g1", 1_000_001, "K1")  # long past: due already
        marker = cancel_marker("Orders", handle, cancel_key("Orders", "K1"), 1_000_000)
        assert marker.topic == TIMER_TOPIC
        assert marker.properties["TAGS"] == RECALL_TAG
        assert timer_tags_code(marker.properties) == -1_000_000
        assert store.put([marker])[0].topic == TIMER_TOPIC, "stored as it is, not refused"

        found, marked = find_timer_record(store, "Orders", "K1")
        assert found is not None and found.physical_offset == stored.physical_offset
        assert marked
        assert find_timer_record(store, "Other", "K1") == (None, False)
    finally:
        store.close()

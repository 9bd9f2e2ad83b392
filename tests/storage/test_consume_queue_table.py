"""consume_queue_table: every ConsumeQueue by (topic, queue), loading, deleted topics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from storage.consume_queue_table import ConsumeQueueTable

UNITS = 10


@pytest.fixture
def table(tmp_path: Path) -> ConsumeQueueTable:
    return ConsumeQueueTable(tmp_path / "consumequeue", UNITS, tmp_path / "deletedTopics.json")


def test_queues_are_created_on_demand_and_found_again(
    table: ConsumeQueueTable, tmp_path: Path
) -> None:
    assert table.find("T", 0) is None and table.max_offset("T", 0) == 0
    queue = table.find_or_create("T", 3)
    assert table.find_or_create("T", 3) is queue
    for offset in range(4):
        assert queue.put(offset * 100, 100, 0, offset)
    table.find_or_create("A", 0).put(400, 100, 0, 0)
    assert (table.topics(), table.queue_ids("T")) == (["A", "T"], [3])
    assert (table.min_offset("T", 3), table.max_offset("T", 3)) == (0, 4)
    assert table.next_offsets() == {("T", 3): 4, ("A", 0): 1}
    assert table.max_physic_offset == 500
    table.flush_all()
    table.close()
    reloaded = ConsumeQueueTable(tmp_path / "consumequeue", UNITS, tmp_path / "deletedTopics.json")
    reloaded.load()
    found = reloaded.find("T", 3)
    assert found is not None
    found.recover()
    assert reloaded.max_offset("T", 3) == 4
    reloaded.close()


def test_a_deleted_topic_is_tombstoned_at_the_commit_log_end_until_its_records_expire(
    table: ConsumeQueueTable, tmp_path: Path
) -> None:
    table.find_or_create("T", 0).put(0, 100, 0, 0)
    assert table.delete_topic("T", commit_log_end=100)
    assert table.find("T", 0) is None and not (tmp_path / "consumequeue" / "T").exists()
    assert json.loads((tmp_path / "deletedTopics.json").read_text()) == {"T": 100}
    assert not table.delete_topic("Never", commit_log_end=100)  # tombstoned all the same
    table.delete_expired(min_physical=100)  # every record up to 100 is gone now
    assert json.loads((tmp_path / "deletedTopics.json").read_text()) == {}

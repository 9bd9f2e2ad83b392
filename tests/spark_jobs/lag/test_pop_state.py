"""pop_state: the lag report reads the in-flight counts the broker's POP service writes."""

from __future__ import annotations

import json
from pathlib import Path

from services.pop.state_file import POP_STATE_FILE, PopSnapshot, save_snapshot
from spark_jobs.lag import pop_state
from spark_jobs.lag.pop_state import read_pop_in_flight


def test_it_reads_what_the_broker_writes(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.mkdir()
    committed = {("g", "T", 0): 12, ("g", "T", 1): 3, ("h", "T", 0): 0}
    in_flight = {("g", "T", 0): 4, ("h", "T", 0): 2}
    save_snapshot(config, PopSnapshot(99, committed, in_flight))
    assert pop_state.POP_STATE_FILE == POP_STATE_FILE
    assert read_pop_in_flight(tmp_path) == {("g", "T", 0): 4, ("h", "T", 0): 2}


def test_no_snapshot_and_bad_entries_read_as_nothing_in_flight(tmp_path: Path) -> None:
    assert read_pop_in_flight(tmp_path) == {}
    config = tmp_path / "config"
    config.mkdir()
    entries = [
        {"group": "g", "topic": "T", "queue_id": "x", "inFlight": 1},
        {"group": "g", "topic": "T"},
        "not an object",
        {"group": "g", "topic": "T", "queue_id": 2, "inFlight": 5},
    ]
    (config / POP_STATE_FILE).write_text(json.dumps({"queues": entries}))
    assert read_pop_in_flight(tmp_path) == {("g", "T", 2): 5}

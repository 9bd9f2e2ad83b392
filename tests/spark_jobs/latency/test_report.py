"""The latency report's rows as JSON, CSV and the printed table."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from spark_jobs.latency.report import (
    CSV_COLUMNS,
    LatencyReport,
    LatencyRow,
    LatencyStats,
    table_lines,
    window_text,
    write_csv,
    write_json,
)

ROW = LatencyRow(
    topic="Orders",
    group="billing",
    messages=3,
    delivered=3,
    acked=2,
    retries=1,
    dead_lettered=0,
    latencies={
        "store_to_delivery": LatencyStats(3, 12.0, 30.5, 1500.0, 2000.0),
        "delivery_to_ack": LatencyStats(2, 4.0, 5.0, 5.0, 5.0),
        "store_to_ack": None,
    },
)
REPORT = LatencyReport(1_750_000_000_000, 1_750_000_000_000, None, ("/data",), {"Orders": 3}, [ROW])


def test_json_keeps_every_figure(tmp_path: Path) -> None:
    write_json(tmp_path / "latency.json", REPORT)
    document = json.loads((tmp_path / "latency.json").read_text())
    assert document["stored"] == {"Orders": 3} and document["to_ms"] is None
    group = document["groups"][0]
    assert group["store_to_delivery"] == {"count": 3, "p50": 12.0, "p90": 30.5, "p99": 1500.0,
                                          "max": 2000.0}  # fmt: skip
    assert group["store_to_ack"] is None and group["retries"] == 1


def test_csv_has_one_line_per_group_with_empty_cells_for_no_figure(tmp_path: Path) -> None:
    write_csv(tmp_path / "latency.csv", [ROW])
    with open(tmp_path / "latency.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert list(rows[0]) == list(CSV_COLUMNS)
    assert rows[0]["store_to_delivery_p99"] == "1500.0" and rows[0]["store_to_ack_max"] == ""


def test_the_table_reads_in_milliseconds_and_seconds() -> None:
    lines = table_lines(REPORT)
    assert "1 topic/group pairs" in lines[0] and "now" in lines[0]
    assert "12 ms / 1.50 s / 2.00 s" in lines[2] and "4 ms / 5 ms / 5 ms" in lines[2]


def test_an_open_window_says_so() -> None:
    assert window_text(None, None) == "the oldest trace .. now"

"""The delivery latency report's figures as plain values: rows, JSON, CSV and the table
(no pyspark).

One row per (topic, consumer group): the messages of the topic stored inside the window that
the group has trace events for, and three latencies of each, in milliseconds:

- ``store_to_delivery``: from the message's store time to its first delivery to the group
  (a pull's serving time, or a POP receive);
- ``delivery_to_ack``: from that first delivery to the ack that ended it (after any retries);
- ``store_to_ack``: the two together.

``retries`` counts deliveries after the first (attempt numbers above 1), ``dead_lettered``
the messages the group moved to its dead-letter queue.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from spark_jobs.formatting import format_count, format_time
from storage.durations import format_millis

STAGES: Final = ("store_to_delivery", "delivery_to_ack", "store_to_ack")
"""The latencies of a row, in the order the report shows them."""

STAGE_TITLES: Final = {
    "store_to_delivery": "store → first delivery",
    "delivery_to_ack": "first delivery → ack",
    "store_to_ack": "store → ack",
}

PERCENTILES: Final = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class LatencyStats:
    """One latency's figures over a row's messages, in ms (percentiles interpolated)."""

    count: int
    p50: float
    p90: float
    p99: float
    max: float

    def to_json(self) -> dict[str, float | int]:
        return {"count": self.count, "p50": self.p50, "p90": self.p90, "p99": self.p99,
                "max": self.max}  # fmt: skip


@dataclass(frozen=True, slots=True)
class LatencyRow:
    """The figures of one consumer group on one topic."""

    topic: str
    group: str
    messages: int  # stored in the window, with events of this group
    delivered: int
    acked: int
    retries: int
    dead_lettered: int
    latencies: Mapping[str, LatencyStats | None]  # by stage; None when no message got there

    def stage(self, name: str) -> LatencyStats | None:
        return self.latencies.get(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "group": self.group,
            "messages": self.messages,
            "delivered": self.delivered,
            "acked": self.acked,
            "retries": self.retries,
            "dead_lettered": self.dead_lettered,
            **{
                stage: None if (stats := self.stage(stage)) is None else stats.to_json()
                for stage in STAGES
            },
        }


@dataclass(frozen=True, slots=True)
class LatencyReport:
    """Everything one run produces."""

    generated_ms: int
    from_ms: int | None
    to_ms: int | None
    sources: tuple[str, ...]  # store directories or broker endpoints
    stored: Mapping[str, int]  # topic -> messages stored in the window (traced)
    rows: Sequence[LatencyRow]

    def to_json(self) -> dict[str, Any]:
        return {
            "generated_ms": self.generated_ms,
            "from_ms": self.from_ms,
            "to_ms": self.to_ms,
            "sources": list(self.sources),
            "stored": dict(sorted(self.stored.items())),
            "groups": [row.to_json() for row in self.rows],
        }


CSV_COLUMNS: Final = (
    "topic",
    "group",
    "messages",
    "delivered",
    "acked",
    "retries",
    "dead_lettered",
    *(f"{stage}_{figure}" for stage in STAGES for figure in ("p50", "p90", "p99", "max")),
)


def csv_record(row: LatencyRow) -> dict[str, Any]:
    """A CSV row: the counts, then each stage's p50, p90, p99 and max (ms; empty: none)."""
    record: dict[str, Any] = {
        "topic": row.topic,
        "group": row.group,
        "messages": row.messages,
        "delivered": row.delivered,
        "acked": row.acked,
        "retries": row.retries,
        "dead_lettered": row.dead_lettered,
    }
    for stage in STAGES:
        stats = row.stage(stage)
        for figure in ("p50", "p90", "p99", "max"):
            record[f"{stage}_{figure}"] = "" if stats is None else f"{getattr(stats, figure):.1f}"
    return record


def write_csv(path: Path, rows: Sequence[LatencyRow]) -> None:
    """``latency.csv``: one line per topic and group."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_record(row) for row in rows)


def write_json(path: Path, report: LatencyReport) -> None:
    """``latency.json``: the whole report."""
    path.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")


def window_text(from_ms: int | None, to_ms: int | None) -> str:
    """``2024-05-01 12:00:00 UTC .. 2024-05-01 13:00:00 UTC`` (open ends say so)."""
    start = "the oldest trace" if from_ms is None else format_time(from_ms)
    end = "now" if to_ms is None else format_time(to_ms)
    return f"{start} .. {end}"


def table_lines(report: LatencyReport) -> list[str]:
    """The summary the command prints: one line per topic and group."""
    lines = [
        f"delivery latency, messages stored {window_text(report.from_ms, report.to_ms)}: "
        f"{len(report.rows)} topic/group pairs"
    ]
    head = (
        f"  {'topic':<24} {'group':<24} {'msgs':>7} {'acked':>7} {'retry':>6} {'dlq':>5}  "
        f"{'delivery p50/p99/max':>28}  {'ack p50/p99/max':>28}"
    )
    lines.append(head)
    for row in report.rows:
        lines.append(
            f"  {row.topic:<24} {row.group:<24} {format_count(row.messages):>7} "
            f"{format_count(row.acked):>7} {format_count(row.retries):>6} "
            f"{format_count(row.dead_lettered):>5}  {_triple(row.stage('store_to_delivery')):>28}"
            f"  {_triple(row.stage('delivery_to_ack')):>28}"
        )
    return lines


def _triple(stats: LatencyStats | None) -> str:
    if stats is None:
        return "—"
    return f"{format_millis(stats.p50)} / {format_millis(stats.p99)} / {format_millis(stats.max)}"

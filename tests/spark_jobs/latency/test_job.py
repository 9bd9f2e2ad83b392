"""The latency report in a real local Spark over trace records written by hand in the trace
format (``{"v": 1, "events": [...]}`` bodies on ``RMQ_SYS_TRACE_TOPIC``) through MessageStore.

Ten messages of Orders are stored one second apart. Group ``billing`` (pull) gets each one
``10 + i`` ms after its store and commits 5 ms later. Group ``audit`` (POP) receives each 100 ms
after its store and acks 20 ms later, except m0 (nacked, received again at +200 ms, acked at
+250 ms) and m1 (received three times, then dead-lettered). Around them: a message stored
before the window, a retry copy's ``stored`` event, a record read twice, a body that is not a
trace batch, and a user message in Orders.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.sql import SparkSession

from spark_jobs import cli
from spark_jobs.latency.job import LatencyConfig, run_latency_report
from spark_jobs.latency.report import LatencyRow, LatencyStats
from storage import Message
from storage.topic_names import TRACE_TOPIC
from tests.spark_jobs.stores import write_store

T0 = 1_750_000_000_000
WINDOW = (T0, T0 + 10_000)


def event(kind: str, at: int, msg_id: str, **fields: Any) -> dict[str, Any]:
    detail = fields.pop("detail", {})
    return {
        "type": kind,
        "at": at,
        "msg_id": msg_id,
        "topic": fields.pop("topic", "Orders"),
        "queue_id": 0,
        "queue_offset": 0,
        "group": fields.pop("group", None),
        "attempt": fields.pop("attempt", None),
        "consumer": None,
        "detail": detail,
    }


def record(*events: dict[str, Any]) -> Message:
    body = json.dumps({"v": 1, "events": list(events)}).encode()
    keys = " ".join(dict.fromkeys(e["msg_id"] for e in events))
    return Message(TRACE_TOPIC, body, 0, {"KEYS": keys, "TAGS": events[0]["type"]})


def delivery(msg: str, group: str, attempt: int, at: int, via: str) -> dict[str, Any]:
    return event(
        "delivered",
        at + 1,
        msg,
        group=group,
        attempt=attempt,
        detail={"via": via, "delivered_at": at},
    )


def scenario() -> tuple[list[Message], dict[str, dict[str, list[int]]]]:
    """The records, and the latencies (ms) each group's messages had, by stage."""
    records: list[Message] = []
    truth: dict[str, dict[str, list[int]]] = {
        group: {"store_to_delivery": [], "delivery_to_ack": [], "store_to_ack": []}
        for group in ("billing", "audit")
    }

    def measured(group: str, stored: int, delivered: int, acked: int | None) -> None:
        truth[group]["store_to_delivery"].append(delivered - stored)
        if acked is not None:
            truth[group]["delivery_to_ack"].append(acked - delivered)
            truth[group]["store_to_ack"].append(acked - stored)

    for i in range(10):
        msg, stored = f"M{i:02d}", T0 + i * 1000
        records.append(record(event("stored", stored, msg, detail={"store_at": stored})))
        pulled, committed = stored + 10 + i, stored + 15 + i
        records.append(
            record(
                delivery(msg, "billing", 1, pulled, "pull"),
                event("acked", committed, msg, group="billing", attempt=1),
            )
        )
        measured("billing", stored, pulled, committed)
        first = stored + 100
        if i == 0:
            records.append(
                record(
                    delivery(msg, "audit", 1, first, "pop"),
                    event("nacked", first + 50, msg, group="audit", attempt=1),
                )
            )
            retry = "%RETRY%audit"
            records.append(record(event("stored", first + 60, msg, topic=retry)))
            records.append(
                record(
                    delivery(msg, "audit", 2, stored + 200, "pop"),
                    event("acked", stored + 250, msg, group="audit", attempt=2),
                )
            )
            measured("audit", stored, first, stored + 250)
        elif i == 1:
            for attempt in (1, 2, 3):
                at = first + (attempt - 1) * 100
                records.append(
                    record(
                        delivery(msg, "audit", attempt, at, "pop"),
                        event("nacked", at + 10, msg, group="audit", attempt=attempt),
                    )
                )
            records.append(
                record(
                    event(
                        "dead_lettered",
                        first + 300,
                        msg,
                        group="audit",
                        attempt=3,
                        detail={"dlq_topic": "%DLQ%audit"},
                    )
                )
            )
            measured("audit", stored, first, None)
        else:
            records.append(
                record(
                    delivery(msg, "audit", 1, first, "pop"),
                    event("acked", first + 20, msg, group="audit", attempt=1),
                )
            )
            measured("audit", stored, first, first + 20)
    records.append(records[3])  # read twice: counts once
    early = T0 - 5000
    records.append(record(event("stored", early, "EARLY", detail={"store_at": early})))
    records.append(record(delivery("EARLY", "billing", 1, early + 1, "pull")))
    records.append(Message(TRACE_TOPIC, b"not a trace batch", 0, {}))
    records.append(Message("Orders", b'{"v": 1, "events": []}', 0, {"KEYS": "M00"}))
    return records, truth


def expected_stats(values: list[int]) -> LatencyStats:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return LatencyStats(len(values), float(p50), float(p90), float(p99), float(max(values)))


def assert_row(row: LatencyRow, truth: dict[str, list[int]]) -> None:
    for stage, values in truth.items():
        found = row.stage(stage)
        assert found is not None
        expected = expected_stats(values)
        assert found.count == expected.count and found.max == expected.max, stage
        for figure in ("p50", "p90", "p99"):
            assert getattr(found, figure) == pytest.approx(getattr(expected, figure)), stage


@pytest.fixture
def trace_store(tmp_path: Path) -> tuple[str, dict[str, dict[str, list[int]]]]:
    records, truth = scenario()
    written = write_store(tmp_path / "store", records)
    return written[0].store_dir, truth


def test_the_figures_are_those_of_the_events(
    spark: SparkSession, trace_store: tuple[str, dict[str, dict[str, list[int]]]], tmp_path: Path
) -> None:
    store, truth = trace_store
    config = LatencyConfig(
        str(tmp_path / "out"), stores=(store,), from_ms=WINDOW[0], to_ms=WINDOW[1]
    )
    report = run_latency_report(spark, config)
    assert dict(report.stored) == {"Orders": 10}
    rows = {row.group: row for row in report.rows}
    assert [(r.topic, r.group) for r in report.rows] == [("Orders", "audit"), ("Orders", "billing")]
    billing, audit = rows["billing"], rows["audit"]
    assert (billing.messages, billing.delivered, billing.acked) == (10, 10, 10)
    assert (billing.retries, billing.dead_lettered) == (0, 0)
    assert (audit.messages, audit.delivered, audit.acked) == (10, 10, 9)
    assert (audit.retries, audit.dead_lettered) == (1 + 2, 1)
    assert_row(billing, truth["billing"])
    assert_row(audit, truth["audit"])

    out = tmp_path / "out"
    document = json.loads((out / "latency.json").read_text())
    assert [g["group"] for g in document["groups"]] == ["audit", "billing"]
    assert document["groups"][1]["store_to_delivery"]["max"] == 19.0
    with open(out / "latency.csv", newline="") as handle:
        lines = list(csv.DictReader(handle))
    assert lines[0]["dead_lettered"] == "1" and lines[1]["store_to_ack_max"] == "24.0"
    html = (out / "report.html").read_text()
    assert "store → first delivery" in html and "<svg" in html and "billing" in html
    assert (out / "latency.parquet").is_dir()


def test_without_a_window_every_stored_message_counts(
    spark: SparkSession, trace_store: tuple[str, dict[str, dict[str, list[int]]]], tmp_path: Path
) -> None:
    store, _ = trace_store
    report = run_latency_report(spark, LatencyConfig(str(tmp_path / "out"), stores=(store,)))
    rows = {row.group: row for row in report.rows}
    assert dict(report.stored) == {"Orders": 11}
    assert rows["billing"].messages == 11 and rows["billing"].acked == 10


def test_the_command_prints_one_line_per_group(
    spark: SparkSession,
    trace_store: tuple[str, dict[str, dict[str, list[int]]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    store, _ = trace_store
    out = tmp_path / "out"
    argv = ["latency", "--store", store, "--out", str(out), "--from", str(WINDOW[0])]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "2 topic/group pairs" in printed
    billing = next(line for line in printed.splitlines() if "billing" in line)
    assert "14 ms / 19 ms / 19 ms" in billing  # store -> delivery: p50 (14.5), p99, max

"""The latency report against ground truth: a real server with message trace on, a few
hundred messages consumed by a pull group (``billing``, offsets committed after each pull)
and a POP group (``audit``, each receive acked), the test reading its own clock around every
request. The broker's times of a step lie between the test's readings before and after the
request that made it, so each true latency lies between a lower and an upper bound, and so
does each percentile (a percentile only grows with the values): the report's figures must
lie inside those bounds, give or take the store's clock precision (1 ms). The report is read
from the store directory and over HTTP, with the same figures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from pyspark.sql import SparkSession

from spark_jobs.latency.job import LatencyConfig, run_latency_report
from spark_jobs.latency.report import LatencyReport, LatencyRow
from tests.conftest import LiveServer, start_server, wait_until

MESSAGES = 240
TOPIC = "Checkout"
CLOCK_MS = 1  # the store's clock precision


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Span:
    """The test's clock before and after a request (ms)."""

    before: int
    after: int


@dataclass
class GroundTruth:
    sent: dict[str, Span] = field(default_factory=dict)  # msg id -> the send
    delivered: dict[str, dict[str, Span]] = field(default_factory=dict)  # group -> key -> span
    acked: dict[str, dict[str, Span]] = field(default_factory=dict)

    def bounds(self, group: str, stage: str) -> tuple[list[int], list[int]]:
        """Each message's lowest and highest possible latency of ``stage`` for ``group``."""
        low, high = [], []
        for key, sent in self.sent.items():
            delivered, acked = self.delivered[group][key], self.acked[group][key]
            start, end = {
                "store_to_delivery": (sent, delivered),
                "delivery_to_ack": (delivered, acked),
                "store_to_ack": (sent, acked),
            }[stage]
            low.append(max(0, end.before - start.after))
            high.append(end.after - start.before)
        return low, high


def timed(call: Any) -> tuple[Any, Span]:
    before = now_ms()
    answer = call()
    return answer, Span(before, now_ms())


def produce(api: httpx.Client, truth: GroundTruth) -> None:
    for i in range(MESSAGES):
        answer, span = timed(
            lambda i=i: api.post(f"/v1/topics/{TOPIC}/messages", json={"body": f"order {i}"})
        )
        assert answer.status_code == 201, answer.text
        truth.sent[answer.json()["messages"][0]["msg_id"]] = span
        if i % 40 == 39:
            time.sleep(0.05)  # spread the store times a little


def consume_by_pull(api: httpx.Client, truth: GroundTruth) -> None:
    delivered, acked = (
        truth.delivered.setdefault("billing", {}),
        truth.acked.setdefault("billing", {}),
    )
    for _ in range(MESSAGES):  # bounded: each round takes at least one message
        pulled, pull_span = timed(
            lambda: api.get(
                f"/v1/groups/billing/topics/{TOPIC}/messages", params={"max_messages": 16}
            )
        )
        answer = pulled.json()
        if not answer["messages"]:
            return
        time.sleep(0.01 * (len(delivered) % 5))  # a processing time that varies
        commits = [
            {"topic": q["topic"], "queue_id": q["queue_id"], "offset": q["next_offset"]}
            for q in answer["queues"]
            if q["next_offset"] > q["offset"]
        ]
        committed, commit_span = timed(
            lambda c=commits: api.post("/v1/groups/billing/offsets", json={"offsets": c})
        )
        assert committed.is_success, committed.text
        for message in answer["messages"]:
            delivered[message["msg_id"]] = pull_span
            acked[message["msg_id"]] = commit_span


def consume_by_pop(api: httpx.Client, truth: GroundTruth) -> None:
    delivered, acked = truth.delivered.setdefault("audit", {}), truth.acked.setdefault("audit", {})
    for _ in range(MESSAGES):
        received, receive_span = timed(
            lambda: api.post(
                f"/v1/groups/audit/topics/{TOPIC}/receive",
                json={"max_messages": 16, "invisible_ms": 600_000},
            )
        )
        messages = received.json()["messages"]
        if not messages:
            return
        time.sleep(0.02)
        handles = [m["receipt_handle"] for m in messages]
        done, ack_span = timed(
            lambda h=handles: api.post("/v1/groups/audit/acks", json={"receipt_handles": h})
        )
        assert done.is_success, done.text
        for message in messages:
            delivered[message["msg_id"]] = receive_span
            acked[message["msg_id"]] = ack_span


@dataclass
class Traced:
    live: LiveServer
    truth: GroundTruth
    window: tuple[int, int]


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    live = start_server(tmp_path_factory.mktemp("store"), trace=True)
    try:
        truth = GroundTruth()
        with httpx.Client(base_url=live.url, timeout=40) as api:
            body = {"write_queue_nums": 4, "read_queue_nums": 4}
            assert api.put(f"/v1/topics/{TOPIC}", json=body).status_code == 201
            start = now_ms()
            produce(api, truth)
            consume_by_pull(api, truth)
            consume_by_pop(api, truth)
            end = now_ms() + 1
            for group in ("billing", "audit"):
                assert set(truth.acked[group]) == set(truth.sent), group
            wait_until(lambda: all_acked(api, list(truth.sent)), timeout=60)
        yield Traced(live, truth, (start, end))
    finally:
        live.stop()


def all_acked(api: httpx.Client, keys: list[str]) -> bool:
    """Whether the trace of the last messages shows both groups' acks (the writer keeps the
    order of its batches: the last ones written means every earlier one too)."""
    for key in keys[-3:]:
        answer = api.get(f"/v1/messages/{key}/trace")
        if answer.status_code != 200:
            return False
        acked = {e["group"] for e in answer.json()["events"] if e["type"] == "acked"}
        if acked != {"billing", "audit"}:
            return False
    return True


def check_against_truth(report: LatencyReport, truth: GroundTruth) -> None:
    rows: dict[str, LatencyRow] = {row.group: row for row in report.rows}
    assert sorted(rows) == ["audit", "billing"]
    assert dict(report.stored) == {TOPIC: MESSAGES}
    for group, row in rows.items():
        assert (row.topic, row.messages, row.delivered, row.acked) == (
            TOPIC,
            MESSAGES,
            MESSAGES,
            MESSAGES,
        ), group
        assert (row.retries, row.dead_lettered) == (0, 0), group
        for stage in ("store_to_delivery", "delivery_to_ack", "store_to_ack"):
            stats = row.stage(stage)
            assert stats is not None and stats.count == MESSAGES, (group, stage)
            low, high = truth.bounds(group, stage)
            for figure, q in (("p50", 50), ("p90", 90), ("p99", 99)):
                value = getattr(stats, figure)
                lowest, highest = np.percentile(low, q), np.percentile(high, q)
                assert lowest - CLOCK_MS <= value <= highest + CLOCK_MS, (group, stage, figure)
            assert max(low) - CLOCK_MS <= stats.max <= max(high) + CLOCK_MS, (group, stage)


def test_the_report_from_the_store_equals_ground_truth(
    spark: SparkSession, traced: Traced, tmp_path: Path
) -> None:
    start, end = traced.window
    config = LatencyConfig(
        str(tmp_path / "out"),
        stores=(str(traced.live.settings.store_dir),),
        from_ms=start,
        to_ms=end,
    )
    check_against_truth(run_latency_report(spark, config), traced.truth)


def test_the_report_over_http_equals_the_one_from_the_store(
    spark: SparkSession, traced: Traced, tmp_path: Path
) -> None:
    start, end = traced.window
    store = str(traced.live.settings.store_dir)
    from_store = run_latency_report(
        spark, LatencyConfig(str(tmp_path / "a"), stores=(store,), from_ms=start, to_ms=end)
    )
    over_http = run_latency_report(
        spark,
        LatencyConfig(str(tmp_path / "b"), brokers=((traced.live.url,),), from_ms=start, to_ms=end),
    )
    check_against_truth(over_http, traced.truth)
    assert over_http.rows == from_store.rows and over_http.stored == from_store.stored

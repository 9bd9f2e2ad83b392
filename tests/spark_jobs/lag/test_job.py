"""The lag report in a real local Spark: four runs over a changing store, with history.

Topic Orders (one queue) grows by 20 messages before each run (max offsets 20, 40, 60, 80).
Runs are one minute apart. The groups commit like this (offset per run):

=========  ==================  =====================================================
group      committed offsets   expected status after four runs
=========  ==================  =====================================================
fast       20, 40, 60, 80      OK (lag 0)
catching   0, 30, 55, 78       OK (lag shrinks: 20, 10, 5, 2), drains in 20 s
slow       5, 10, 15, 20       WARN (offsets move, lag grows 15, 30, 45, 60)
stopped    5 (run 1 only)      STOP (no commit since the first run)
stalled    5, 5, 5, 5          STALL (commits arrive, offset never moves)
rewound    10, 15, 8, 12       REWIND
ghost      (configured only)   NOTFOUND
=========  ==================  =====================================================
"""

from __future__ import annotations

import csv
import re
import time
from pathlib import Path

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
from pyspark.sql import SparkSession

from spark_jobs import cli
from spark_jobs.formatting import format_duration, format_time
from spark_jobs.lag.burrow import Status
from spark_jobs.lag.job import LagReportConfig, run_lag_report
from spark_jobs.lag.output import iso_utc, utc_date
from spark_jobs.lag.report import LagReport
from storage import Message, MessageStore, PutResult
from storage.config_managers import (
    ConsumerOffsetManager,
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from tests.spark_jobs.stores import CONFIG

# The first run: a full hour a day ahead, so that every message is stored before it however
# long the suite runs before this module's tests (store times come from the wall clock); each
# run is 60 s after the previous one.
START = (time.time_ns() // 1_000_000 // 3_600_000 + 24) * 3_600_000
COMMITS: dict[str, list[int | None]] = {
    "fast": [20, 40, 60, 80],
    "catching": [0, 30, 55, 78],
    "slow": [5, 10, 15, 20],
    "stopped": [5, None, None, None],
    "stalled": [5, 5, 5, 5],
    "rewound": [10, 15, 8, 12],
}


class Scenario:
    """The store, its consumer offsets, and the reports of each run."""

    def __init__(self, root: Path) -> None:
        self.store = root / "store"
        self.history = root / "history"
        self.root = root
        self.now = START
        self.offsets = ConsumerOffsetManager(self.store / "config", now_ms=lambda: self.now - 1_000)
        self.results: list[PutResult] = []
        self.reports: list[LagReport] = []

    def produce(self, count: int) -> None:
        with MessageStore.open(self.store, CONFIG) as store:
            for _ in range(count):
                self.results.append(store.put([Message("Orders", b"o" * 40)])[0])

    def run(self, spark: SparkSession, index: int) -> LagReport:
        self.now = START + index * 60_000
        self.produce(20)
        for group, offsets in COMMITS.items():
            offset = offsets[index]
            if offset is not None:
                self.offsets.commit_offset(group, "Orders", 0, offset)
        self.offsets.persist()
        config = LagReportConfig(
            stores=(str(self.store.resolve()),),
            out=str(self.root / f"out{index}"),
            history=str(self.history),
            now_ms=self.now,
        )
        report = run_lag_report(spark, config)
        self.reports.append(report)
        return report


@pytest.fixture(scope="module")
def scenario(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    scenario = Scenario(tmp_path_factory.mktemp("lag"))
    scenario.produce(0)
    with MessageStore.open(scenario.store, CONFIG) as store:
        for _ in range(3):
            store.put([Message("%RETRY%slow", b"r")])
        for _ in range(2):
            store.put([Message("%DLQ%slow", b"d")])
    SubscriptionGroupManager(scenario.store / "config").put(SubscriptionGroupConfig("ghost"))
    for index in range(4):
        scenario.run(spark, index)
    return scenario


def test_statuses_follow_the_history_rules(scenario: Scenario) -> None:
    first = {g.group: g.status for g in scenario.reports[0].groups}
    assert set(first.values()) <= {Status.OK, Status.NOTFOUND}  # one snapshot: no evidence
    last = {g.group: g.status for g in scenario.reports[-1].groups}
    assert last == {
        "fast": Status.OK,
        "catching": Status.OK,
        "slow": Status.WARN,
        "stopped": Status.STOP,
        "stalled": Status.STALL,
        "rewound": Status.REWIND,
        "ghost": Status.NOTFOUND,
    }
    assert {g.group: g.complete for g in scenario.reports[-1].groups}["slow"] == pytest.approx(0.4)


def test_numbers_equal_hand_computed_lag(scenario: Scenario) -> None:
    report = scenario.reports[-1]
    now = START + 180_000
    queues = {(q.snapshot.group, q.snapshot.topic): q for q in report.queues}
    slow = queues[("slow", "Orders")].snapshot
    assert (slow.max_offset, slow.committed_offset, slow.lag) == (80, 20, 60)
    oldest = scenario.results[20].store_timestamp  # the message at offset 20
    assert slow.oldest_unconsumed_ms == oldest
    assert slow.lag_seconds == pytest.approx((now - oldest) / 1000)
    assert slow.last_commit_ms == now - 1_000
    stopped = queues[("stopped", "Orders")].snapshot
    assert (stopped.lag, stopped.last_commit_ms) == (75, START - 1_000)
    groups = {g.group: g for g in report.groups}
    catching = groups["catching"]
    # consume (78 - 0) / 180 s, produce (80 - 20) / 180 s: 0.1 msg/s net; lag 2 -> 20 s.
    assert catching.rates.consume == pytest.approx(78 / 180)
    assert catching.rates.produce == pytest.approx(60 / 180)
    assert catching.time_to_drain_seconds == pytest.approx(20.0)
    assert groups["slow"].time_to_drain_seconds is None  # produces faster than it consumes
    assert (groups["slow"].retry_depth, groups["slow"].dlq_depth) == (3, 2)
    assert groups["fast"].total_lag == 0 and groups["fast"].time_to_drain_seconds == 0.0
    assert groups["rewound"].total_lag == 68


def test_outputs_parquet_csv_and_history(scenario: Scenario) -> None:
    out = scenario.root / "out3"
    queues = pq.read_table(out / "queues.parquet").to_pylist()
    groups = pq.read_table(out / "groups.parquet").to_pylist()
    report = scenario.reports[-1]
    assert len(queues) == len(report.queues) and len(groups) == len(report.groups)
    slow = next(q for q in queues if q["group"] == "slow" and q["topic"] == "Orders")
    assert (slow["lag_messages"], slow["status"], slow["window_snapshots"]) == (60, "WARN", 4)
    assert slow["snapshot_time"].timestamp() * 1000 == START + 180_000
    with open(out / "queues.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(queues)
    slow_csv = next(r for r in rows if r["group"] == "slow" and r["topic"] == "Orders")
    assert slow_csv["lag_messages"] == "60"
    assert slow_csv["snapshot_time"] == iso_utc(START + 180_000)
    with open(out / "groups.csv", newline="") as handle:
        group_rows = {r["group"]: r for r in csv.DictReader(handle)}
    assert group_rows["stopped"]["status"] == "STOP"
    history = pq.read_table(scenario.history).to_pylist()
    assert len({row["snapshot_ms"] for row in history}) == 4
    assert {str(row["date"]) for row in history} == {utc_date(START)}
    assert len(history) == sum(len(r.queues) for r in scenario.reports)


def test_html_report_is_self_contained(scenario: Scenario) -> None:
    html = (scenario.root / "out3" / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert "<svg" in html and "<polyline" in html
    for status in ("WARN", "STOP", "STALL", "REWIND", "NOTFOUND"):
        assert f">{status}</span>" in html
    assert format_time(START + 180_000) in html
    assert "<script" not in html.lower()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "@import" not in html and "url(" not in html


def test_command_line_lag_report(
    scenario: Scenario, spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    args = ["lag-report", "--store", str(scenario.store), "--out", str(out)]
    now = iso_utc(START + 240_000)
    code = cli.main([*args, "--now", now, "--fail-on", "error"])
    output = capsys.readouterr().out
    assert code == 0  # no history given: one snapshot is never an error
    assert f"lag report at {format_time(START + 240_000)}, 7 groups" in output
    assert (out / "report.html").exists() and (out / "groups.csv").exists()
    code = cli.main(
        [*args, "--history", str(scenario.history), "--now", now, "--fail-on", "error"]
    )  # fmt: skip
    assert code == 3


def test_a_broken_offsets_file_is_reported_not_raised(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "store" / "config"
    config.mkdir(parents=True)
    (config / "consumerOffset.json").write_text('{"offsetTable": []}')
    code = cli.main(
        ["lag-report", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "o")]
    )
    assert code == 1
    assert "consumerOffset.json" in capsys.readouterr().err


def test_the_command_line_reads_durations_as_the_report_does_and_shows_progress(
    scenario: Scenario, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = START + 240_000
    args = ["lag-report", "--store", str(scenario.store), "--out", str(tmp_path / "cli")]
    assert cli.main([*args, "--now", iso_utc(now)]) == 0
    printed = capsys.readouterr()
    [slow] = [line for line in printed.out.splitlines() if " slow " in line]
    oldest = (now - scenario.results[20].store_timestamp) / 1000  # slow's first unconsumed
    assert f"oldest {format_duration(oldest):>12}" in slow
    html = (tmp_path / "cli" / "report.html").read_text()
    assert format_duration(oldest) in html
    assert "lag-report: snapshot of" in printed.err and "outputs written to" in printed.err


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="make test installs chromium")
def test_the_html_report_fits_1280_pixels(scenario: Scenario) -> None:
    from playwright.sync_api import sync_playwright

    report = (scenario.root / "out3" / "report.html").resolve()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium")
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.route(
            "**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()
        )
        page.goto(report.as_uri())
        widths = page.evaluate(
            "() => [...document.querySelectorAll('.scroll')]"
            ".map(e => [e.scrollWidth, e.clientWidth])"
        )
        note_lines = page.evaluate(
            "() => [...document.querySelectorAll('td.note')].filter(e => e.textContent)"
            ".map(e => e.getBoundingClientRect().height"
            " / (parseFloat(getComputedStyle(e).lineHeight) || 16))"
        )
        browser.close()
    assert widths and all(scroll <= client for scroll, client in widths), widths
    assert note_lines and max(note_lines) <= 4, note_lines  # not one word a line

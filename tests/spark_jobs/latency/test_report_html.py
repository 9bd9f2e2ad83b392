"""The latency report's HTML page: cards, table, one log-scale bar chart per latency."""

from __future__ import annotations

from spark_jobs.latency.report import LatencyReport, LatencyRow, LatencyStats
from spark_jobs.latency.report_html import bar_chart, log_ticks, render_report

ROW = LatencyRow("Orders", "audit", 2, 2, 1, 3, 1,
                 {"store_to_delivery": LatencyStats(2, 100.0, 180.0, 198.0, 200.0),
                  "delivery_to_ack": LatencyStats(1, 20.0, 20.0, 20.0, 20.0),
                  "store_to_ack": LatencyStats(1, 120.0, 120.0, 120.0, 120.0)})  # fmt: skip


def test_ticks_are_powers_of_ten_up_to_the_largest_value() -> None:
    assert log_ticks(200.0) == [1.0, 10.0, 100.0, 1000.0]
    assert log_ticks(0.5) == [1.0]


def test_each_figure_is_a_bar_with_its_value() -> None:
    svg = bar_chart([ROW], "store_to_delivery")
    assert svg.count("<rect") == 4 + 4  # legend and bars
    assert "Orders / audit · p99 198 ms" in svg


def test_the_page_names_the_window_sources_and_dead_letters() -> None:
    report = LatencyReport(1_750_000_000_000, None, None, ("http://broker:8080",), {"Orders": 2},
                           [ROW])  # fmt: skip
    page = render_report(report)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "http://broker:8080" in page and "the oldest trace .. now" in page
    assert 'class="card bad"><b>1</b><span>Dead-lettered' in page
    assert "100 ms / 180 ms / 198 ms / 200 ms" in page


def test_an_empty_report_says_there_is_nothing() -> None:
    page = render_report(LatencyReport(0, None, None, (), {}, []))
    assert "No traced message was stored inside the window." in page

"""report_html: the self-contained page, its chart scale and times to drain (no Spark)."""

from __future__ import annotations

from spark_jobs.lag.report import evaluate
from spark_jobs.lag.report_html import format_drain, nice_ceiling, render_report, time_ticks
from spark_jobs.lag.snapshot import take_snapshot
from tests.spark_jobs.lag.conftest import KnownStore


def test_the_page_names_every_group_and_loads_nothing_from_elsewhere(
    known_store: KnownStore,
) -> None:
    report = evaluate(take_snapshot([known_store.store_dir], known_store.now), {})
    series = {"billing": {known_store.now - 60_000: 7, known_store.now: 6}}
    page = render_report(report, series, history=None)
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    for group in ("billing", "audit", "ghost"):
        assert group in page
    assert "<script" not in page and "<link" not in page and " src=" not in page


def test_chart_scales_ticks_and_drain_times() -> None:
    assert [nice_ceiling(v) for v in (0, 3, 7, 23, 240)] == [1.0, 5.0, 10.0, 25.0, 250.0]
    noon = 1_714_564_800_000  # 2024-05-01 12:00 UTC
    assert time_ticks(noon + 1, noon + 180_000) == [noon + 60_000, noon + 120_000, noon + 180_000]
    assert format_drain(None, 0, known=False) == "0 s"
    assert "needs 2 snapshots" in format_drain(None, 5, known=False)
    assert format_drain(None, 5, known=True) == "not draining"

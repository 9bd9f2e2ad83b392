"""The latency report as one self-contained HTML page: summary cards, the table, and for each
latency a bar chart of every group's p50, p90, p99 and max (inline SVG, logarithmic scale, no
scripts), in the lag report's style."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Final

from spark_jobs.formatting import format_count, format_time
from spark_jobs.lag.report_html import PALETTE, REPORT_CSS
from spark_jobs.latency.report import (
    STAGE_TITLES,
    STAGES,
    LatencyReport,
    LatencyRow,
    LatencyStats,
    window_text,
)
from storage.durations import format_millis

FIGURES: Final = ("p50", "p90", "p99", "max")

_CSS: Final = REPORT_CSS + ".chart{margin-bottom:12px}"
"""The lag report's style, charts apart."""


def _label(row: LatencyRow) -> str:
    return f"{row.topic} / {row.group}"


def log_ticks(top_ms: float) -> list[float]:
    """Powers of ten from 1 ms up to the first at or above ``top_ms``."""
    ticks = [1.0]
    while ticks[-1] < top_ms:
        ticks.append(ticks[-1] * 10)
    return ticks


def bar_chart(rows: Sequence[LatencyRow], stage: str, width: int = 1100) -> str:
    """Horizontal bars of each row's p50, p90, p99 and max for one latency (log scale)."""
    measured = [(row, stats) for row in rows if (stats := row.stage(stage)) is not None]
    if not measured:
        return '<p class="muted">No message reached this step inside the window.</p>'
    left, right, bar, gap = 260, 24, 9, 14
    ticks = log_ticks(max(stats.max for _, stats in measured))
    span = math.log10(ticks[-1]) or 1.0
    inner = width - left - right
    height = 40 + len(measured) * (bar * len(FIGURES) + gap)

    def x(value: float) -> float:
        return left + inner * math.log10(max(value, 1.0)) / span

    parts = [_legend(left)]
    for tick in ticks:
        parts.append(
            f'<line x1="{x(tick):.1f}" x2="{x(tick):.1f}" y1="24" y2="{height - 16}" '
            f'stroke="#d8dee4"/><text x="{x(tick):.1f}" y="{height - 4}" font-size="11" '
            f'text-anchor="middle" fill="#57606a">{escape(format_millis(tick))}</text>'
        )
    y = 28
    for row, stats in measured:
        parts.append(_bars(row, stats, y, left, bar, x))
        y += bar * len(FIGURES) + gap
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="100%" '
        f'role="img" aria-label="{escape(STAGE_TITLES[stage])} per group">{"".join(parts)}</svg>'
    )


def _legend(left: int) -> str:
    items = []
    for index, figure in enumerate(FIGURES):
        x = left + index * 70
        items.append(
            f'<rect x="{x}" y="4" width="12" height="12" fill="{PALETTE[index]}"/>'
            f'<text x="{x + 16}" y="14" font-size="12">{figure}</text>'
        )
    return "".join(items)


def _bars(row: LatencyRow, stats: LatencyStats, y: int, left: int, bar: int, x: object) -> str:
    scale = x  # the chart's log scale: ms -> pixels
    label = escape(_label(row) if len(_label(row)) <= 38 else _label(row)[:37] + "…")
    parts = [
        f'<text x="{left - 8}" y="{y + bar * 2 + 4}" font-size="12" text-anchor="end">'
        f"{label}</text>"
    ]
    for index, figure in enumerate(FIGURES):
        value = float(getattr(stats, figure))
        end = scale(value)  # type: ignore[operator]
        parts.append(
            f'<rect x="{left}" y="{y + index * bar}" width="{max(end - left, 1):.1f}" '
            f'height="{bar - 1}" fill="{PALETTE[index]}"><title>{escape(_label(row))} · '
            f"{figure} {escape(format_millis(value))}</title></rect>"
        )
    return "".join(parts)


def _cards(report: LatencyReport) -> str:
    stored = sum(report.stored.values())
    acked = sum(row.acked for row in report.rows)
    retries = sum(row.retries for row in report.rows)
    dead = sum(row.dead_lettered for row in report.rows)
    worst = max(
        (s.p99 for row in report.rows if (s := row.stage("store_to_ack")) is not None),
        default=None,
    )
    cards = [
        ("", "Messages stored (traced)", format_count(stored)),
        ("", "Topic / group pairs", format_count(len(report.rows))),
        ("", "Acks", format_count(acked)),
        ("", "Retries (deliveries after the first)", format_count(retries)),
        ("bad" if dead else "", "Dead-lettered", format_count(dead)),
        ("", "Worst p99 store → ack", format_millis(worst)),
    ]
    return "".join(
        f'<div class="card {kind}"><b>{escape(value)}</b><span>{escape(label)}</span></div>'
        for kind, label, value in cards
    )


_HEAD: Final = (
    "<tr><th>Topic</th><th>Group</th><th class=num>Messages</th><th class=num>Delivered</th>"
    "<th class=num>Acked</th><th class=num>Retries</th><th class=num>DLQ</th>"
    + "".join(
        f"<th class=num>{escape(STAGE_TITLES[stage])}<br>p50 / p90 / p99 / max</th>"
        for stage in STAGES
    )
    + "</tr>"
)


def _row(row: LatencyRow) -> str:
    cells = [
        f"<td>{escape(row.topic)}</td>",
        f"<td><b>{escape(row.group)}</b></td>",
        *(
            f'<td class="num">{format_count(value)}</td>'
            for value in (row.messages, row.delivered, row.acked, row.retries, row.dead_lettered)
        ),
    ]
    for stage in STAGES:
        stats = row.stage(stage)
        text = (
            "—"
            if stats is None
            else " / ".join(format_millis(getattr(stats, figure)) for figure in FIGURES)
        )
        cells.append(f'<td class="num">{escape(text)}</td>')
    return "<tr>" + "".join(cells) + "</tr>"


def _explanations() -> str:
    return (
        "<h2>How to read this report</h2><dl>"
        "<dt>Messages</dt><dd>messages of the topic stored inside the window that the group "
        "has trace events for (a message no group has received yet is not in any row).</dd>"
        "<dt>store → first delivery</dt><dd>the broker's store time to the first time the "
        "group got the message (a pull served, or a POP receive).</dd>"
        "<dt>first delivery → ack</dt><dd>that first delivery to the ack that ended it, "
        "retries included (a pull's ack is its offset commit).</dd>"
        "<dt>Retries</dt><dd>deliveries after the first (attempt numbers above 1).</dd>"
        "<dt>Percentiles</dt><dd>interpolated between the two nearest messages; times are the "
        "broker's clock, to the millisecond.</dd></dl>"
    )


def render_report(report: LatencyReport) -> str:
    """The whole page."""
    generated = format_time(report.generated_ms)
    sources = ", ".join(f"<code>{escape(s)}</code>" for s in report.sources)
    table = (
        f'<div class="scroll"><table>{_HEAD}{"".join(_row(r) for r in report.rows)}</table></div>'
        if report.rows
        else '<p class="muted">No traced message was stored inside the window.</p>'
    )
    charts = "".join(
        f"<h2>{escape(STAGE_TITLES[stage])}</h2>"
        f'<div class="chart">{bar_chart(report.rows, stage)}</div>'
        for stage in STAGES
    )
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>spoolmq delivery latency — {generated}</title><style>{_CSS}</style></head>"
        "<body><main><h1>spoolmq delivery latency report</h1>"
        f'<p class="meta">Generated {generated} · messages stored '
        f"{escape(window_text(report.from_ms, report.to_ms))} · sources {sources}</p>"
        f'<section class="cards">{_cards(report)}</section>'
        f"<h2>Per topic and consumer group</h2>{table}{charts}{_explanations()}"
        "</main></body></html>\n"
    )

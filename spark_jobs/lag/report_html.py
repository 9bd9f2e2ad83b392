"""The lag report as one self-contained HTML page: tables, an inline SVG chart, no scripts.

Everything is drawn here (no chart library, no external CSS, fonts or images), so the page
opens from a mail attachment or an air-gapped share. Times are UTC; every number has a unit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Final

from spark_jobs.formatting import (
    format_count,
    format_duration,
    format_per_second,
    format_time,
)
from spark_jobs.lag.burrow import Status
from spark_jobs.lag.report import GroupLag, LagReport, QueueLag, worst_queues

PALETTE: Final = (
    "#0072b2",
    "#d55e00",
    "#009e73",
    "#cc79a7",
    "#e69f00",
    "#56b4e9",
    "#6e4c9e",
    "#3d3d3d",
)
"""Okabe-Ito based, readable by colour-blind operators."""
MAX_SERIES: Final = len(PALETTE)

STATUS_COLORS: Final = {
    Status.OK: ("#1a7f37", "#dafbe1"),
    Status.WARN: ("#7d4e00", "#fff8c5"),
    Status.STOP: ("#a40e26", "#ffebe9"),
    Status.STALL: ("#953800", "#fff1e5"),
    Status.REWIND: ("#6639ba", "#fbefff"),
    Status.NOTFOUND: ("#57606a", "#eaeef2"),
}
"""(text, background) per status."""

STATUS_HELP: Final = {
    Status.OK: "the group keeps up, or its lag was 0 at some point of the window",
    Status.WARN: "offsets move but the lag never decreased across the window (consumer too slow)",
    Status.STOP: "no commit for longer than the window's commits span (consumer stopped)",
    Status.STALL: "commits keep arriving but the offset does not move while there is lag",
    Status.REWIND: "the committed offset went backwards",
    Status.NOTFOUND: "the group is configured but has no committed offsets",
}

REPORT_CSS: Final = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;
margin:0;background:#f6f8fa}
main{max-width:1280px;margin:0 auto;padding:24px}
h1{font-size:24px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 8px}
.meta{color:#57606a;margin:0}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-top:16px}
.card{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:10px 14px;min-width:150px}
.card b{display:block;font-size:22px}.card span{color:#57606a;font-size:12px}
.card.bad{border-color:#cf222e;background:#fff5f5}.card.warn{border-color:#bf8700;background:#fffbea}
.scroll{overflow-x:auto;border:1px solid #d0d7de;border-radius:6px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{padding:5px 6px;border-bottom:1px solid #d8dee4;text-align:left;vertical-align:middle}
th{background:#eef1f4;font-weight:600;font-size:12px;position:sticky;top:0}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
th.num{text-align:right}
td.time{white-space:nowrap;font-variant-numeric:tabular-nums}
td.path{font-size:12px;color:#57606a;white-space:nowrap}
small{display:block;color:#57606a;font-size:11px}
td.name{white-space:nowrap}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-weight:600;font-size:12px}
.muted{color:#57606a}.note{font-size:12px;color:#57606a}td.note{min-width:14em}
.chart{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:8px}
dl{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:10px 14px}
dt{font-weight:600;margin-top:6px}dd{margin:0 0 0 12px}
code{font-size:12px}
"""


# --------------------------------------------------------------------------- formatting


def format_drain(seconds: float | None, lag: int, known: bool) -> str:
    """Time to drain, saying why when there is none."""
    if lag == 0:
        return "0 s"
    if not known:
        return "—<small>needs 2 snapshots</small>"
    if seconds is None:
        return "not draining"
    return format_duration(seconds)


def _store_name(store_dir: str) -> str:
    """The store's directory name (its full path is the cell's title)."""
    return escape(Path(store_dir).name or store_dir)


def status_badge(status: Status) -> str:
    """A coloured status label."""
    text, background = STATUS_COLORS[status]
    return (
        f'<span class="badge" style="color:{text};background:{background}" '
        f'title="{escape(STATUS_HELP[status])}">{status.value}</span>'
    )


# --------------------------------------------------------------------------- the chart


@dataclass(frozen=True, slots=True)
class _Frame:
    """Plot area and scales of the chart."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    t0: int
    t1: int
    y_max: float

    def x(self, milliseconds: int) -> float:
        span = self.t1 - self.t0
        inner = self.width - self.left - self.right
        return self.left + inner * (milliseconds - self.t0) / span

    def y(self, value: float) -> float:
        inner = self.height - self.top - self.bottom
        return self.top + inner * (1 - value / self.y_max)


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 x 10^k at or above ``value`` (1 for 0)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * math.pow(10, exponent)
        if candidate >= value:
            return candidate
    return math.pow(10, exponent + 1)  # pragma: no cover - the loop always returns


_TIME_STEPS: Final = (
    60_000,
    5 * 60_000,
    15 * 60_000,
    30 * 60_000,
    3_600_000,
    3 * 3_600_000,
    6 * 3_600_000,
    12 * 3_600_000,
    86_400_000,
    2 * 86_400_000,
    7 * 86_400_000,
)


def time_ticks(t0: int, t1: int, most: int = 7) -> list[int]:
    """Round UTC times between t0 and t1, at most ``most`` of them."""
    span = max(1, t1 - t0)
    step = next((s for s in _TIME_STEPS if span / s <= most), 30 * 86_400_000)
    first = -(-t0 // step) * step
    return list(range(first, t1 + 1, step))


def _tick_label(milliseconds: int, span: int) -> str:
    moment = datetime.fromtimestamp(milliseconds / 1000, UTC)
    return moment.strftime("%H:%M") if span <= 86_400_000 else moment.strftime("%m-%d %H:%M")


def _axes(frame: _Frame, unit: str) -> list[str]:
    parts = []
    for index in range(6):
        value = frame.y_max * index / 5
        y = frame.y(value)
        parts.append(
            f'<line x1="{frame.left}" x2="{frame.width - frame.right}" y1="{y:.1f}" '
            f'y2="{y:.1f}" stroke="#d8dee4"/>'
            f'<text x="{frame.left - 8}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="#57606a">{value:,.0f}</text>'
        )
    span = frame.t1 - frame.t0
    bottom = frame.height - frame.bottom
    for tick in time_ticks(frame.t0, frame.t1):
        x = frame.x(tick)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{bottom}" y2="{bottom + 5}" stroke="#57606a"/>'
            f'<text x="{x:.1f}" y="{bottom + 18}" text-anchor="middle" font-size="11" '
            f'fill="#57606a">{_tick_label(tick, span)}</text>'
        )
    parts.append(
        f'<line x1="{frame.left}" x2="{frame.width - frame.right}" y1="{bottom}" y2="{bottom}" '
        f'stroke="#57606a"/>'
        f'<text x="14" y="{frame.top + (bottom - frame.top) / 2:.0f}" font-size="12" '
        f'fill="#1f2328" transform="rotate(-90 14 {frame.top + (bottom - frame.top) / 2:.0f})" '
        f'text-anchor="middle">{escape(unit)}</text>'
        f'<text x="{(frame.left + frame.width - frame.right) / 2:.0f}" y="{frame.height - 6}" '
        f'font-size="12" fill="#1f2328" text-anchor="middle">time (UTC)</text>'
    )
    return parts


def _series_marks(frame: _Frame, name: str, points: list[tuple[int, int]], color: str) -> str:
    coordinates = " ".join(f"{frame.x(t):.1f},{frame.y(v):.1f}" for t, v in points)
    marks = [f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{coordinates}"/>']
    for t, v in points:
        marks.append(
            f'<circle cx="{frame.x(t):.1f}" cy="{frame.y(v):.1f}" r="3" fill="{color}">'
            f"<title>{escape(name)} · {format_time(t)} · {v:,} messages</title></circle>"
        )
    return "".join(marks)


def _legend(names: Sequence[str], frame: _Frame) -> str:
    items = []
    x = frame.left
    for index, name in enumerate(names):
        color = PALETTE[index % len(PALETTE)]
        label = escape(name if len(name) <= 28 else name[:27] + "…")
        items.append(
            f'<rect x="{x}" y="4" width="12" height="12" fill="{color}"/>'
            f'<text x="{x + 16}" y="14" font-size="12" fill="#1f2328">{label}</text>'
        )
        x += 24 + 7 * min(len(name), 28)
    return "".join(items)


def svg_line_chart(
    series: Mapping[str, Mapping[int, int]],
    width: int = 1100,
    height: int = 340,
    unit: str = "lag (messages)",
) -> str:
    """An inline SVG line chart of ``name -> {time ms: value}`` (at most 8 series)."""
    names = list(series)[:MAX_SERIES]
    points = {name: sorted(series[name].items()) for name in names}
    times = [t for name in names for t, _ in points[name]]
    if not times:
        return (
            '<p class="muted">No lag history yet: run the report with <code>--history</code>.</p>'
        )
    t0, t1 = min(times), max(times)
    if t0 == t1:
        t0, t1 = t0 - 1_800_000, t1 + 1_800_000
    top_value = max((v for name in names for _, v in points[name]), default=0)
    frame = _Frame(
        width, height, 72, 16, 28, 44, t0, t1, nice_ceiling(max(top_value * 1.05, 5))
    )  # whole-message ticks
    body = _axes(frame, unit)
    for index, name in enumerate(names):
        body.append(_series_marks(frame, name, points[name], PALETTE[index % len(PALETTE)]))
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="100%" role="img" aria-label="Lag per group over time">'
        f"{_legend(names, frame)}{''.join(body)}</svg>"
    )


# --------------------------------------------------------------------------- tables


def _cards(report: LagReport) -> str:
    errors = sum(1 for g in report.groups if g.status.is_error)
    warnings = sum(1 for g in report.groups if g.status is Status.WARN)
    total = sum(g.total_lag for g in report.groups)
    oldest = max((g.max_lag_seconds or 0.0 for g in report.groups), default=0.0)
    cards = [
        ("", "Consumer groups", format_count(len(report.groups))),
        ("bad" if errors else "", "Groups in error (STOP / STALL / REWIND)", format_count(errors)),
        ("warn" if warnings else "", "Groups with a warning (WARN)", format_count(warnings)),
        ("", "Total lag", f"{total:,} msg"),
        ("", "Oldest unconsumed message", format_duration(oldest)),
    ]
    return "".join(
        f'<div class="card {kind}"><b>{value}</b><span>{escape(label)}</span></div>'
        for kind, label, value in cards
    )


def sparkline(points: Mapping[int, int], width: int = 120, height: int = 28) -> str:
    """A tiny inline SVG of one series on its own scale (empty with fewer than 2 points)."""
    ordered = sorted(points.items())
    if len(ordered) < 2:
        return '<span class="muted">—</span>'
    t0, t1 = ordered[0][0], ordered[-1][0]
    top = max(v for _, v in ordered) or 1
    span = max(1, t1 - t0)
    coordinates = " ".join(
        f"{2 + (width - 4) * (t - t0) / span:.1f},{height - 2 - (height - 4) * v / top:.1f}"
        for t, v in ordered
    )
    last_x, last_y = coordinates.rsplit(" ", 1)[-1].split(",")
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="lag trend, max {top:,} messages"><title>max {top:,} messages</title>'
        f'<polyline fill="none" stroke="#0969da" stroke-width="1.5" points="{coordinates}"/>'
        f'<circle cx="{last_x}" cy="{last_y}" r="2" fill="#0969da"/></svg>'
    )


def _group_row(group: GroupLag, trend: Mapping[int, int]) -> str:
    where = ""
    if group.max_lag is not None:
        where = f"<small>{escape(group.max_lag.topic)} / queue {group.max_lag.queue_id}</small>"
    drain = format_drain(
        group.time_to_drain_seconds, group.total_lag, group.rates.consume is not None
    )
    never = (
        f"<small>{group.never_committed_queues} never committed</small>"
        if group.never_committed_queues
        else ""
    )
    cells = [
        f'<td class="name"><b>{escape(group.group)}</b></td>',
        f"<td>{status_badge(group.status)}</td>",
        f"<td>{sparkline(trend)}</td>",
        f'<td class="num">{format_count(group.total_lag)}</td>',
        f'<td class="num">{format_count(group.max_lag.lag if group.max_lag else None)}{where}</td>',
        f'<td class="num">{format_duration(group.max_lag_seconds)}</td>',
        f'<td class="num">{format_per_second(group.rates.consume)}</td>',
        f'<td class="num">{format_per_second(group.rates.produce)}</td>',
        f'<td class="num">{drain}</td>',
        f'<td class="num">{format_count(group.retry_depth)}</td>',
        f'<td class="num">{format_count(group.dlq_depth)}</td>',
        f'<td class="time">{format_time(group.last_commit_ms, suffix=False)}</td>',
        f'<td class="num">{group.queues}{never}</td>',
        f'<td class="num">{group.complete:.0%}</td>',
    ]
    return "<tr>" + "".join(cells) + "</tr>"


_GROUP_HEAD: Final = (
    "<tr><th>Group</th><th>Status</th><th>Lag trend</th><th class=num>Total lag (msg)</th>"
    "<th class=num>Max lag (msg)</th><th class=num>Oldest unconsumed</th>"
    "<th class=num>Consume (msg/s)</th><th class=num>Produce (msg/s)</th>"
    "<th class=num>Time to drain</th><th class=num>Retry (msg)</th>"
    "<th class=num>DLQ (msg)</th><th>Last commit (UTC)</th><th class=num>Queues</th>"
    "<th class=num>Evidence</th></tr>"
)


def _queue_row(queue: QueueLag) -> str:
    row = queue.snapshot
    notes = []
    if row.never_committed:
        notes.append("never committed: position is the queue's min offset")
    if row.data_loss:
        notes.append("committed offset below min offset: messages expired unconsumed")
    if row.in_flight:
        notes.append(f"{format_count(row.in_flight)} in flight (POP: received, not acked)")
    if row.topic_kind != "normal":
        notes.append(f"{row.topic_kind} topic")
    committed = "never" if row.never_committed else format_count(row.committed_offset)
    drain = format_drain(queue.time_to_drain_seconds, row.lag, queue.rates.consume is not None)
    cells = [
        f'<td class="name">{escape(row.group)}</td>',
        f'<td class="name">{escape(row.topic)}</td>',
        f'<td class="num">{row.queue_id}</td>',
        f"<td>{status_badge(queue.status)}</td>",
        f'<td class="num">{format_count(row.max_offset)}</td>',
        f'<td class="num">{committed}</td>',
        f'<td class="num">{format_count(row.lag)}</td>',
        f'<td class="num">{format_duration(row.lag_seconds)}</td>',
        f'<td class="time">{format_time(row.oldest_unconsumed_ms, suffix=False)}</td>',
        f'<td class="time">{format_time(row.last_commit_ms, suffix=False)}</td>',
        f'<td class="num">{drain}</td>',
        f'<td class="path" title="{escape(row.store_dir)}">{_store_name(row.store_dir)}</td>',
        f'<td class="note">{escape("; ".join(notes))}</td>',
    ]
    return "<tr>" + "".join(cells) + "</tr>"


_QUEUE_HEAD: Final = (
    "<tr><th>Group</th><th>Topic</th><th class=num>Queue</th><th>Status</th>"
    "<th class=num>Broker max offset</th><th class=num>Committed offset</th>"
    "<th class=num>Lag (msg)</th><th class=num>Lag (time)</th>"
    "<th>Oldest unconsumed stored (UTC)</th><th>Last commit (UTC)</th>"
    "<th class=num>Time to drain</th><th>Store</th><th>Notes</th></tr>"
)


def _legend_section(report: LagReport) -> str:
    items = "".join(
        f"<dt>{status_badge(status)}</dt><dd>{escape(text)}</dd>"
        for status, text in STATUS_HELP.items()
    )
    return (
        "<h2>How to read this report</h2><dl>"
        "<dt>Lag (msg)</dt><dd>broker max offset &minus; committed offset; a queue the group never "
        "committed counts from its min offset.</dd>"
        "<dt>Lag (time)</dt><dd>now &minus; store time of the oldest unconsumed message.</dd>"
        "<dt>Time to drain</dt><dd>lag &divide; (consume rate &minus; produce rate), rates "
        "measured between the first and last snapshot of the window.</dd>"
        f"<dt>Status</dt><dd>LinkedIn Burrow's rules over the last {report.window} snapshots "
        "of each queue (a group shows its worst queue). A queue is OK whenever its lag is 0 "
        "or was 0 inside the window, and until two snapshots exist.</dd>"
        f"{items}<dt>Evidence</dt><dd>share of the status window filled with snapshots.</dd>"
        "</dl>"
    )


def render_report(
    report: LagReport,
    series: Mapping[str, Mapping[int, int]],
    history: str | None = None,
    chart_hours: float = 24.0,
    limit: int = 25,
) -> str:
    """The whole page: summary, groups, the lag chart and the worst queues."""
    generated = format_time(report.now_ms)
    ordered = sorted(series, key=lambda g: -max(series[g].values(), default=0))
    chart = svg_line_chart({name: series[name] for name in ordered})
    dropped = len(ordered) - MAX_SERIES
    dropped_note = (
        f'<p class="note">{dropped} more groups with smaller lag are not drawn.</p>'
        if dropped > 0
        else ""
    )
    worst = worst_queues(report, limit)
    groups = sorted(report.groups, key=lambda g: (-g.status.severity, -g.total_lag, g.group))
    history_note = f"history <code>{escape(history)}</code>" if history else "no history kept"
    stores = ", ".join(f"<code>{escape(s)}</code>" for s in report.stores)
    queue_table = (
        f'<div class="scroll"><table>{_QUEUE_HEAD}'
        f"{''.join(_queue_row(q) for q in worst)}</table></div>"
        if worst
        else '<p class="muted">No queue has any lag.</p>'
    )
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>spoolmq consumer lag — {generated}</title><style>{REPORT_CSS}</style></head>"
        "<body><main>"
        "<h1>spoolmq consumer lag report</h1>"
        f'<p class="meta">Generated {generated} · stores {stores} · status window '
        f"{report.window} snapshots · {history_note}</p>"
        f'<section class="cards">{_cards(report)}</section>'
        f'<h2>Consumer groups</h2><div class="scroll"><table>{_GROUP_HEAD}'
        f"{''.join(_group_row(g, series.get(g.group, {})) for g in groups)}</table></div>"
        f"<h2>Lag per group over time (last {chart_hours:g} h, messages)</h2>"
        f'<div class="chart">{chart}</div>{dropped_note}'
        f"<h2>Worst queues (top {limit})</h2>{queue_table}"
        f"{_legend_section(report)}"
        "</main></body></html>\n"
    )

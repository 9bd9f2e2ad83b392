"""Human-readable numbers, durations and times (UTC) for reports and progress lines.

Durations come from :func:`storage.durations.format_duration`, the admin pages' format too.
"""

from __future__ import annotations

from datetime import UTC, datetime

from storage.durations import format_duration as format_duration


def format_time(milliseconds: int | None, suffix: bool = True) -> str:
    """``2024-05-01 12:00:00 UTC`` (without `` UTC`` if not ``suffix``; or an em dash)."""
    if milliseconds is None:
        return "—"
    text = datetime.fromtimestamp(milliseconds / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{text} UTC" if suffix else text


def format_count(value: int | None) -> str:
    """Thousands separated (or an em dash)."""
    return "—" if value is None else f"{value:,}"


def format_rate(rate: float | None) -> str:
    """``12.5 msg/s`` (or an em dash)."""
    return "—" if rate is None else f"{rate:,.1f} msg/s"


def format_per_second(rate: float | None) -> str:
    """A rate without its unit: ``12.5``, and two significant digits below 1 (``0.04``),
    so that a slow consumer never reads as ``0.0`` beside a finite time to drain."""
    if rate is None:
        return "—"
    if rate == 0 or abs(rate) >= 1:
        return f"{rate:,.1f}"
    return f"{rate:.2g}"


def format_number(value: float | None, digits: int = 1) -> str:
    """``1,234.5`` (or an em dash)."""
    return "—" if value is None else f"{value:,.{digits}f}"

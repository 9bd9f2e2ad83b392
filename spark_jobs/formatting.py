"""Human-readable numbers, durations and times (UTC) for reports and progress lines."""

from __future__ import annotations

import math
from datetime import UTC, datetime


def format_time(milliseconds: int | None, suffix: bool = True) -> str:
    """``2024-05-01 12:00:00 UTC`` (without `` UTC`` if not ``suffix``; or an em dash)."""
    if milliseconds is None:
        return "—"
    text = datetime.fromtimestamp(milliseconds / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return f"{text} UTC" if suffix else text


def format_count(value: int | None) -> str:
    """Thousands separated (or an em dash)."""
    return "—" if value is None else f"{value:,}"


def format_duration(seconds: float | None) -> str:
    """``0 s``, ``42 s``, ``3 min 5 s``, ``2 h 10 min``, ``3 d 4 h`` (or an em dash)."""
    if seconds is None or math.isnan(seconds):
        return "—"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s" if secs else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"


def format_rate(rate: float | None) -> str:
    """``12.5 msg/s`` (or an em dash)."""
    return "—" if rate is None else f"{rate:,.1f} msg/s"


def format_number(value: float | None, digits: int = 1) -> str:
    """``1,234.5`` (or an em dash)."""
    return "—" if value is None else f"{value:,.{digits}f}"

"""Durations for people, in one format for the admin pages and the Spark reports and logs.

The format counts whole seconds, rounded down: an age shown is never older than the real one.
"""

from __future__ import annotations

import math

NO_VALUE = "—"
"""What an unknown duration reads as."""


def format_duration(seconds: float | None) -> str:
    """``0 s``, ``42 s``, ``3 min 5 s``, ``3 min``, ``2 h 10 min``, ``3 d 4 h``; an em dash
    for None, NaN or infinity; negative durations read as ``0 s``."""
    if seconds is None or not math.isfinite(seconds):
        return NO_VALUE
    whole = max(0, math.floor(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return _pair(minutes, "min", secs, "s")
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return _pair(hours, "h", minutes, "min")
    days, hours = divmod(hours, 24)
    return _pair(days, "d", hours, "h")


def _pair(major: int, major_unit: str, minor: int, minor_unit: str) -> str:
    """``2 h 10 min``, or ``2 h`` when the smaller unit is 0."""
    text = f"{major} {major_unit}"
    return f"{text} {minor} {minor_unit}" if minor else text


def format_millis(milliseconds: float | None) -> str:
    """A short duration to the millisecond (latencies, steps of a message's timeline):
    ``0 ms``, ``2.5 ms``, ``850 ms``, ``12.35 s``; from a minute on :func:`format_duration`'s
    format. An em dash for None, NaN or infinity; negative durations read as ``0 ms``."""
    if milliseconds is None or not math.isfinite(milliseconds):
        return NO_VALUE
    value = max(0.0, float(milliseconds))
    if value < 10 and not value.is_integer():
        return f"{value:.1f} ms"
    if value < 1000:
        return f"{round(value)} ms"
    if value < 60_000:
        return f"{value / 1000:.2f} s"
    return format_duration(value / 1000)

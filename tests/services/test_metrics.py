"""Traffic counters and the pull-latency histogram (Prometheus ``le`` buckets)."""

from __future__ import annotations

from services.metrics import Histogram, Metrics


def test_histogram_buckets_are_cumulative_and_inclusive() -> None:
    histogram = Histogram((0.1, 1.0, 10.0))
    for value in (0.05, 0.1, 0.5, 3.0, 30.0):
        histogram.observe(value)
    assert histogram.cumulative() == [(0.1, 2), (1.0, 3), (10.0, 4)]
    assert histogram.count == 5  # the one past the last bucket counts in +Inf only
    assert histogram.total == 33.65


def test_counters_per_topic() -> None:
    metrics = Metrics()
    metrics.sent("a", 2, 10)
    metrics.sent("a", 1, 5)
    metrics.delivered("a", 3, 15)
    metrics.delivered("b", 0, 0)  # an empty pull counts nothing
    assert (metrics.messages_in["a"], metrics.bytes_in["a"]) == (3, 15)
    assert (metrics.messages_out["a"], metrics.bytes_out["a"]) == (3, 15)
    assert "b" not in metrics.messages_out

"""Messages in/out per second for the Overview chart: a bounded ring of counter samples.

The broker's :class:`services.Metrics` counts messages per topic since start. Once a second
:class:`TrafficSampler` stores the two totals; rates are the differences between neighbours.
Ten minutes of seconds (600 samples) is all it keeps, plus one per-topic snapshot every
ten seconds for the last minute's top topics. The task starts and stops with the app (the
admin router's lifespan); without it, page views take the samples.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Final

from starlette.applications import Starlette

from services import Metrics

CAPACITY: Final = 600  # seconds of history
TOPIC_MARK_EVERY_S: Final = 10.0
TOPIC_WINDOW_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class Sample:
    at: float  # seconds since the epoch
    messages_in: int  # total since start
    messages_out: int


@dataclass(frozen=True, slots=True)
class RateSeries:
    """Per-second rates between neighbouring samples, for uPlot (x in epoch seconds)."""

    at: list[float]
    in_per_s: list[float]
    out_per_s: list[float]


@dataclass(frozen=True, slots=True)
class TopicTraffic:
    topic: str
    messages_in: int  # since start
    messages_out: int
    in_per_s: float  # over the last minute (or less, just after start)
    out_per_s: float


@dataclass(frozen=True, slots=True)
class _TopicMark:
    at: float
    messages_in: Counter[str]
    messages_out: Counter[str]


class TrafficSampler:
    """Samples a :class:`Metrics` once a second into a ring of :data:`CAPACITY`."""

    def __init__(
        self, metrics: Metrics, capacity: int = CAPACITY, clock: Callable[[], float] = time.time
    ) -> None:
        self._metrics = metrics
        self._clock = clock
        self._samples: deque[Sample] = deque(maxlen=capacity)
        self._marks: deque[_TopicMark] = deque(maxlen=int(TOPIC_WINDOW_S / TOPIC_MARK_EVERY_S) + 1)

    def sample(self) -> None:
        """Record the totals now (call on the event loop thread: Metrics lives there)."""
        now = self._clock()
        metrics = self._metrics
        self._samples.append(Sample(now, metrics.messages_in.total(), metrics.messages_out.total()))
        if not self._marks or now - self._marks[-1].at >= TOPIC_MARK_EVERY_S:
            self._marks.append(
                _TopicMark(now, Counter(metrics.messages_in), Counter(metrics.messages_out))
            )

    def rates(self) -> RateSeries:
        at: list[float] = []
        rates_in: list[float] = []
        rates_out: list[float] = []
        for before, after in itertools.pairwise(self._samples):
            elapsed = after.at - before.at
            if elapsed <= 0:
                continue
            at.append(round(after.at, 3))
            rates_in.append(round((after.messages_in - before.messages_in) / elapsed, 2))
            rates_out.append(round((after.messages_out - before.messages_out) / elapsed, 2))
        return RateSeries(at, rates_in, rates_out)

    def top_topics(self, limit: int = 10) -> list[TopicTraffic]:
        """The busiest topics since start (in + out), with their recent rates."""
        metrics = self._metrics
        totals = metrics.messages_in + metrics.messages_out
        oldest = self._marks[0] if self._marks else None
        elapsed = self._clock() - oldest.at if oldest is not None else 0.0
        top = []
        for topic, _ in totals.most_common(limit):
            now_in, now_out = metrics.messages_in[topic], metrics.messages_out[topic]
            in_rate = out_rate = 0.0
            if oldest is not None and elapsed > 0:
                in_rate = (now_in - oldest.messages_in[topic]) / elapsed
                out_rate = (now_out - oldest.messages_out[topic]) / elapsed
            top.append(TopicTraffic(topic, now_in, now_out, in_rate, out_rate))
        return top

    async def run(self, interval_s: float = 1.0) -> None:
        """Sample every ``interval_s`` until cancelled."""
        while True:
            self.sample()
            await asyncio.sleep(interval_s)


def traffic_sampler(app: Starlette) -> TrafficSampler:
    """The app's sampler, created on first use from ``app.state.broker.metrics``."""
    sampler: TrafficSampler | None = getattr(app.state, "admin_traffic", None)
    if sampler is None:
        sampler = TrafficSampler(app.state.broker.metrics)
        app.state.admin_traffic = sampler
    return sampler


def sampled_traffic(app: Starlette) -> TrafficSampler:
    """The sampler, with a fresh sample when no task samples it (no lifespan ran)."""
    sampler = traffic_sampler(app)
    if getattr(app.state, "admin_traffic_task", None) is None:
        sampler.sample()
    return sampler


@asynccontextmanager
async def sampling_lifespan(app: Starlette) -> AsyncIterator[None]:
    """Run the sampler for as long as the app runs (the admin router's lifespan)."""
    sampler = traffic_sampler(app)
    task = asyncio.create_task(sampler.run(), name="admin-traffic-sampler")
    app.state.admin_traffic_task = task
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

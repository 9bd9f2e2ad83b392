"""Timer messages: scheduling cost, a million waiting in bounded memory, a burst due in one
second, and lateness at 1 s and 100 ms precision under load.

Everything runs in one process on a real store (files in a temp directory), with the broker's
own pieces: ``Appender``, ``IdempotencyService`` and ``TimerService`` on one asyncio loop, as
in ``spoolmq serve`` (HTTP is measured elsewhere: ``bench/http_bench.py``).

1. **Scheduling cost**: ``--plain`` plain puts of 200-byte messages, then as many timer puts
   (an hour ahead) in the same store; then the time the timer service takes to place them
   all in the wheel. Ratio: timer puts/s over plain puts/s.
2. **A million waiting** (``--million``): that many timer messages, due evenly over
   ``--spread`` seconds starting ``--lead`` seconds after the last is sent; RSS (anonymous
   and file-backed, from ``/proc/self/status``) before, once all are in the wheel, and at
   the end; lateness of every delivery (its store time minus its requested time).
3. **A burst** (``--burst``): that many messages due at the same millisecond; how long after
   that time the last one is delivered.
4. **Precision under load**: ``--load-messages`` timer messages at random milliseconds over
   ``--load-spread`` seconds while plain sends run flat out on the same loop; lateness p50 /
   p99 / max with a 1000 ms wheel and with a 100 ms wheel, same run.

Lateness is measured on the delivered copies (their fresh store time against the
``TIMER_DELIVER_MS`` they carry). Never negative: a message is never delivered early.

Run by hand::

    uv run python bench/timer_bench.py
    uv run python bench/timer_bench.py --million 200000 --burst 20000   # a quicker look
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from services.appender import Appender
from services.durability import DurabilityTracker
from services.idempotency import IdempotencyService
from services.timer.service import TimerService
from storage import Message, MessageStore, StoreConfig
from storage.record.decode import decode_record
from storage.timer import TimerConfig

BODY = b"x" * 200
CHUNK = 1000  # puts between two yields to the loop


def rss() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process, in MiB."""
    values = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "RssAnon", "RssFile"):
            values[name] = int(rest.split()[0]) // 1024
    return values


class Bench:
    """A store with its timer service on the running loop."""

    def __init__(self, root: Path, precision_ms: int) -> None:
        timer = TimerConfig(precision_ms=precision_ms)
        self.store = MessageStore.open(root, StoreConfig(timer=timer))
        self.appender = Appender(self.store, DurabilityTracker(self.store))
        idempotency = IdempotencyService(self.store, self.appender)
        self.timers = TimerService(self.store, self.appender.put, idempotency, "bench")

    async def start(self) -> None:
        await self.timers.start()

    async def close(self) -> None:
        await self.timers.stop()
        self.store.close()

    async def schedule(self, topic: str, times: list[int]) -> float:
        """Put one timer message per time; seconds taken."""
        put = self.store.put
        started = time.perf_counter()
        for number, at in enumerate(times, start=1):
            put([Message(topic, BODY, properties={"TIMER_DELIVER_MS": str(at)})])
            if number % CHUNK == 0:
                await asyncio.sleep(0)
        return time.perf_counter() - started

    async def placed(self) -> float:
        """Seconds until the timer service has placed every stored timer message."""
        started = time.perf_counter()
        while True:
            progress = self.timers.progress()
            assert progress is not None
            if progress.enqueue_behind == 0:
                return time.perf_counter() - started
            await asyncio.sleep(0.01)

    def delivered(self, topic: str) -> int:
        return sum(self.store.max_offset_in_queue(topic, q) for q in self.store.queue_ids(topic))

    async def wait_delivered(self, topic: str, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.delivered(topic) < count:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {self.delivered(topic)} of {count} delivered in time")
            await asyncio.sleep(0.05)

    def lateness_ms(self, topic: str) -> list[int]:
        """Store time minus requested time of every delivered message of ``topic``."""
        late = []
        for queue_id in self.store.queue_ids(topic):
            queue = self.store.find_consume_queue(topic, queue_id)
            assert queue is not None
            for offset in range(queue.min_offset, queue.max_offset):
                unit = queue.get_unit(offset)
                assert unit is not None
                data = self.store.commit_log.read(unit[0], unit[1])
                assert data is not None
                record = decode_record(data)
                late.append(record.store_timestamp - int(record.properties["TIMER_DELIVER_MS"]))
        return late


def summary(late: list[int]) -> str:
    ordered = sorted(late)

    def pct(p: float) -> int:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))]

    return (
        f"n={len(ordered):,} min={ordered[0]} ms p50={pct(0.5)} ms p99={pct(0.99)} ms "
        f"max={ordered[-1]} ms"
    )


def now_ms() -> int:
    return int(time.time() * 1000)


async def scheduling_cost(root: Path, count: int) -> None:
    bench = Bench(root, 1000)
    await bench.start()
    try:
        put = bench.store.put
        started = time.perf_counter()
        for number in range(1, count + 1):
            put([Message("Plain", BODY)])
            if number % CHUNK == 0:
                await asyncio.sleep(0)
        plain = count / (time.perf_counter() - started)
        later = now_ms() + 3_600_000
        timed = count / await bench.schedule("Timed", [later + n % 1000 for n in range(count)])
        placing = await bench.placed()
        print(
            f"1. scheduling: plain puts {plain:,.0f}/s, timer puts {timed:,.0f}/s "
            f"(ratio {timed / plain:.2f}); placed in the wheel within {placing:.2f} s after "
            "the last put"
        )
    finally:
        await bench.close()


async def million(root: Path, count: int, lead_s: float, spread_s: float) -> None:
    bench = Bench(root, 1000)
    await bench.start()
    try:
        before = rss()
        # Times are fixed after the puts: the first is due lead_s after the last put.
        scheduled_at = time.perf_counter()
        estimate_s = count / 40_000 + lead_s
        start = now_ms() + int(estimate_s * 1000)
        times = [start + int(n * spread_s * 1000 / count) for n in range(count)]
        took = await bench.schedule("Million", times)
        placing = await bench.placed()
        in_wheel = rss()
        margin = (start - now_ms()) / 1000
        print(
            f"2. {count:,} scheduled in {took:.1f} s ({count / took:,.0f}/s), placed "
            f"{placing:.1f} s later; first due {margin:.1f} s after that"
        )
        await bench.wait_delivered("Million", count, estimate_s + spread_s + 600)
        end = rss()
        print(f"   RSS MiB: before {before}, all in the wheel {in_wheel}, all delivered {end}")
        print(f"   lateness: {summary(bench.lateness_ms('Million'))}")
        print(f"   total {time.perf_counter() - scheduled_at:.0f} s")
    finally:
        await bench.close()


async def burst(root: Path, count: int) -> None:
    bench = Bench(root, 1000)
    await bench.start()
    try:
        due = now_ms() + int(count / 30_000 * 1000) + 5000
        await bench.schedule("Burst", [due] * count)
        await bench.placed()
        assert now_ms() < due, "scheduling took longer than the lead: raise it"
        await bench.wait_delivered("Burst", count, 600)
        late = bench.lateness_ms("Burst")
        last = max(late)
        print(
            f"3. burst: {count:,} due at the same ms, the last delivered {last} ms after it "
            f"({count / max(last, 1) * 1000:,.0f}/s); lateness {summary(late)}"
        )
    finally:
        await bench.close()


async def precision_under_load(root: Path, precision_ms: int, count: int, spread_s: float) -> str:
    bench = Bench(root, precision_ms)
    await bench.start()
    stop = asyncio.Event()
    sent = 0

    async def load() -> None:
        nonlocal sent
        put = bench.store.put
        while not stop.is_set():
            for _ in range(200):
                put([Message("Load", BODY)])
            sent += 200
            await asyncio.sleep(0)

    try:
        rng = random.Random(precision_ms)
        start = now_ms() + 2000
        times = sorted(start + rng.randrange(int(spread_s * 1000)) for _ in range(count))
        loader = asyncio.create_task(load())
        await bench.schedule("Precise", times)
        began = time.perf_counter()
        await bench.wait_delivered("Precise", count, spread_s + 120)
        rate = sent / (time.perf_counter() - began)
        stop.set()
        await loader
        late = bench.lateness_ms("Precise")
        return f"precision {precision_ms} ms: {summary(late)}; load {rate:,.0f} plain puts/s"
    finally:
        await bench.close()


async def main(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="timer-bench-"))
    parts: list[tuple[str, Callable[[Path], object]]] = []
    if not args.skip_cost:
        parts.append(("cost", lambda root: scheduling_cost(root, args.plain)))
    if args.million:
        parts.append(("million", lambda r: million(r, args.million, args.lead, args.spread)))
    if args.burst:
        parts.append(("burst", lambda root: burst(root, args.burst)))
    try:
        for name, part in parts:
            await part(base / name)  # type: ignore[misc]
            shutil.rmtree(base / name, ignore_errors=True)
        if args.load_messages:
            print("4. lateness under load:")
            for precision in (1000, 100):
                root = base / f"load-{precision}"
                line = await precision_under_load(
                    root, precision, args.load_messages, args.load_spread
                )
                print(f"   {line}")
                shutil.rmtree(root, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain", type=int, default=200_000)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--million", type=int, default=1_000_000)
    parser.add_argument("--lead", type=float, default=10.0)
    parser.add_argument("--spread", type=float, default=120.0)
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--load-messages", type=int, default=20_000)
    parser.add_argument("--load-spread", type=float, default=20.0)
    return parser.parse_args()


if __name__ == "__main__":
    arguments = parse_args()
    load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"timer bench, {time.strftime('%Y-%m-%d %H:%M')}, load average {load}")
    asyncio.run(main(arguments))

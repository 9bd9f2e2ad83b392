"""POP receive cost against the number of messages in flight, in process (no HTTP).

A broker on a temp store, one topic of 8 queues filled with 1 KiB messages; one POP group
receives 16 at a time and never acks, so every receive adds 16 in flight. The event loop
thread's CPU time (``time.thread_time``) is summed over windows of receives taken at about
``--low`` and about ``--high`` messages in flight; the figure is CPU microseconds per receive
and the ratio high/low (1.0: a receive's cost does not depend on what is in flight).

Run by hand (not part of the test suite)::

    uv run python bench/pop_inflight_bench.py
    uv run python bench/pop_inflight_bench.py --low 1000 --high 40000 --window 200 --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from services import Broker, BrokerConfig, OutgoingMessage, StoreConfig
from services.pop.service import ReceiveOptions
from storage.config_managers import TopicConfig

TOPIC = "Inflight"
QUEUES = 8
BATCH = 16
BODY = b"x" * 1024


async def fill(broker: Broker, count: int) -> None:
    for start in range(0, count, 100):
        batch = [OutgoingMessage(BODY) for _ in range(min(100, count - start))]
        await broker.send.send(TOPIC, batch)


async def receive_window(broker: Broker, receives: int) -> float:
    """CPU microseconds of the loop thread per receive, over ``receives`` receives."""
    options = ReceiveOptions(max_messages=BATCH, invisible_ms=3_600_000, wait_ms=0)
    start = time.thread_time()
    for _ in range(receives):
        got = await broker.pop.receive("G", TOPIC, options)
        assert len(got.messages) == BATCH, "the topic ran dry: raise --high's fill"
    return (time.thread_time() - start) / receives * 1e6


async def receive_until(broker: Broker, in_flight: int) -> None:
    options = ReceiveOptions(max_messages=BATCH, invisible_ms=3_600_000, wait_ms=0)
    while broker.pop.table.in_flight() < in_flight:
        await broker.pop.receive("G", TOPIC, options)


async def one_run(root: Path, low: int, high: int, window: int) -> tuple[float, float]:
    store = StoreConfig(commit_log_file_size=64 * 1024 * 1024)
    broker = Broker(BrokerConfig(root / "store", store))
    await broker.start()
    try:
        await broker.topics.ensure(
            TopicConfig(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        )
        await fill(broker, high + 2 * window * BATCH + 1000)
        await receive_until(broker, low)
        at_low = await receive_window(broker, window)
        await receive_until(broker, high)
        at_high = await receive_window(broker, window)
        return at_low, at_high
    finally:
        await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--low", type=int, default=1000)
    parser.add_argument("--high", type=int, default=40_000)
    parser.add_argument("--window", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    lows, highs = [], []
    for _ in range(args.repeats):
        root = Path(tempfile.mkdtemp(prefix="pop-inflight-"))
        try:
            at_low, at_high = asyncio.run(one_run(root, args.low, args.high, args.window))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        lows.append(at_low)
        highs.append(at_high)
        print(f"in flight ~{args.low}: {at_low:8.0f} us/receive   ~{args.high}: {at_high:8.0f}")
    low, high = statistics.median(lows), statistics.median(highs)
    print(
        f"median: {low:.0f} us at ~{args.low}, {high:.0f} us at ~{args.high}; "
        f"ratio {high / low:.2f}x"
    )


if __name__ == "__main__":
    main()

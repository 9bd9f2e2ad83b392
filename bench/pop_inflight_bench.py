"""POP receive cost against the number of messages in flight, in process (no HTTP).

Two brokers on temp stores in one process, each with one topic of 8 queues of 1 KiB messages
and one POP group: one holds about ``--low`` messages in flight, the other about ``--high``
(received with a long invisibility and never acked). Then, alternating between the two, each
broker receives 16 and acks them again (the in-flight counts stay put); only the receive is
timed, as CPU time of the event loop thread (``time.thread_time``), so other work on the host
moves both sides alike. The figure is CPU microseconds per receive on each side and their
ratio high/low (1.0: a receive costs the same whatever is in flight).

Run by hand (not part of the test suite)::

    uv run python bench/pop_inflight_bench.py
    uv run python bench/pop_inflight_bench.py --low 1000 --high 40000 --receives 300 --repeats 3
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
HOLD = ReceiveOptions(max_messages=BATCH, invisible_ms=3_600_000, wait_ms=0)


async def loaded_broker(root: Path, in_flight: int, receives: int) -> Broker:
    """A running broker with ``in_flight`` messages in flight and enough left to receive."""
    broker = Broker(BrokerConfig(root, StoreConfig(commit_log_file_size=64 * 1024 * 1024)))
    await broker.start()
    await broker.topics.ensure(TopicConfig(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES))
    total = in_flight + receives * BATCH + 1000
    for start in range(0, total, 100):
        batch = [OutgoingMessage(BODY) for _ in range(min(100, total - start))]
        await broker.send.send(TOPIC, batch)
    while broker.pop.table.in_flight() < in_flight:
        await broker.pop.receive("G", TOPIC, HOLD)
    return broker


async def timed_receive(broker: Broker) -> float:
    """CPU seconds of one receive of 16; its messages are acked again (not timed)."""
    start = time.thread_time()
    got = await broker.pop.receive("G", TOPIC, HOLD)
    spent = time.thread_time() - start
    assert len(got.messages) == BATCH, "the topic ran dry"
    await broker.pop.ack("G", [m.receipt_handle for m in got.messages])
    return spent


async def one_run(root: Path, low: int, high: int, receives: int) -> tuple[float, float]:
    brokers = [
        await loaded_broker(root / "low", low, receives),
        await loaded_broker(root / "high", high, receives),
    ]
    try:
        spent = [0.0, 0.0]
        for _ in range(receives):
            for side, broker in enumerate(brokers):
                spent[side] += await timed_receive(broker)
        return spent[0] / receives * 1e6, spent[1] / receives * 1e6
    finally:
        for broker in brokers:
            await broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--low", type=int, default=1000)
    parser.add_argument("--high", type=int, default=40_000)
    parser.add_argument("--receives", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    ratios = []
    for _ in range(args.repeats):
        root = Path(tempfile.mkdtemp(prefix="pop-inflight-"))
        try:
            at_low, at_high = asyncio.run(one_run(root, args.low, args.high, args.receives))
        finally:
            shutil.rmtree(root, ignore_errors=True)
        ratios.append(at_high / at_low)
        print(
            f"{args.low} in flight: {at_low:6.0f} us/receive   {args.high}: {at_high:6.0f}"
            f"   ratio {at_high / at_low:.2f}x"
        )
    print(f"median ratio {statistics.median(ratios):.2f}x over {args.repeats} runs")


if __name__ == "__main__":
    main()

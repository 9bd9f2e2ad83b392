"""A long-polled POP receive through the proxy in front of two broker groups: what it delivers
late (hidden, then redelivered) and how long a message waits, for each way to long-poll.

A real etcd, two ``spoolmq serve`` brokers in cluster mode (groups g1 and g2) and, for each
way, a fresh proxy process (this script, ``--serve-proxy``, serves one as ``spoolmq proxy``
does, in one process, with that way in place of the proxy's own), all on 127.0.0.1; the
clients run in this process, in threads of their own. The ways:

* ``in-turn`` (the proxy's own, :func:`app.proxy.fanout.long_poll_in_turn`): the groups
  one at a time, a turn of ``--turn-ms`` each (also run with the other turns given);
* ``race``: every group at once, the first answer with messages taken, the others cancelled
  (what an answer that lost held stays invisible until its invisibility ends);
* ``race-merge``: every group at once, the first answer with messages and every other that
  came back by then taken (may answer more than ``max_messages``), the rest cancelled.

Each way runs on a topic of its own (8 queues: 0-3 on g1, 4-7 on g2) and a consumer group of
its own:

1. Load: producers send ``--messages`` bodies at ``--rate`` per second over all 8 queues, in
   bursts of ``--burst`` (so that workers park between them, and the bursts reach both groups
   at once), while ``--workers`` consumers loop receive (``--max-messages``, ``wait_ms`` 2000,
   ``invisible_ms`` 10000) and ack; until every body was seen (or 25 s after the last
   send). Bodies first seen with ``delivery_attempt`` >= 2 (``late``: hidden by a receive
   that did not answer them), bodies seen more than once, messages the brokers handed out
   beyond what the consumers got (``spoolmq_pop_received_total`` of both brokers),
   send->first receive p50/p99, and proxy receives per message.
2. Sparse: one consumer long-polls (``wait_ms`` 2000) while one message is sent every 150 ms,
   to g1 or g2 (the same random choices for every way): send->receive p50/p99/max.

Run by hand (not part of the test suite)::

    uv run python bench/pop_proxy_bench.py
    uv run python bench/pop_proxy_bench.py --messages 6000 --burst 80 --turns 250,500
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
from failover_bench import HttpProcess, free_port, start_etcd, wait_for
from proxy_bench import CLUSTER, broker

from app.proxy import fanout, pop
from app.proxy.fanout import GroupAnswer
from app.proxy.forward import BrokerAnswer
from app.proxy.main import create_proxy_app, proxy_server

WAYS = ("in-turn", "race", "race-merge")
LONG_POLL = "long_poll_in_turn"
QUEUES = 8
WAIT_MS = 2000
INVISIBLE_MS = 10_000


# ==================================================================== the proxy, with a way


def serve_proxy(way: str, turn_ms: int, etcd: str, port: int) -> int:
    """Serve a proxy, as ``spoolmq proxy`` does, in this one process (so that ``way`` is the
    long-poll of its POP receive) on 127.0.0.1:``port``."""
    ways: dict[str, object] = {
        "in-turn": functools.partial(fanout.long_poll_in_turn, turn_ms=turn_ms),
        "race": race,
        "race-merge": race_merge,
    }
    setattr(pop, LONG_POLL, ways[way])  # what the receive endpoint calls, by its name there
    sock = socket.create_server(("127.0.0.1", port))
    with sock:
        proxy_server(create_proxy_app(CLUSTER, [etcd])).run(sockets=[sock])
    return 0


Ask = Callable[[str, int], Awaitable[BrokerAnswer]]


async def race(groups: Sequence[str], wait_ms: int, ask: Ask) -> GroupAnswer | None:
    """Every group at once; the first answer with messages wins, the others are cancelled."""
    return await fanout.first_non_empty(groups, lambda name: ask(name, wait_ms))


async def race_merge(groups: Sequence[str], wait_ms: int, ask: Ask) -> GroupAnswer | None:
    """Every group at once; the first answer with messages and every other one back by
    then are taken (as one answer, maybe over ``max_messages``), the rest cancelled."""
    tasks = [
        asyncio.create_task(fanout.first_non_empty([name], ask_for(ask, wait_ms)))
        for name in groups
    ]
    found: list[GroupAnswer] = []
    try:
        for finished in asyncio.as_completed(tasks):
            if await finished is not None:
                break
        found = [r for t in tasks if t.done() and not t.cancelled() and (r := t.result())]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if not found:
        return None
    messages: list[object] = []
    for answer in found:
        messages += answer.answer.json()["messages"]
    merged = BrokerAnswer(200, orjson.dumps({"messages": messages}), "application/json", [])
    return GroupAnswer(found[0].broker_group, merged, len(messages))


def ask_for(ask: Ask, wait_ms: int) -> Callable[[str], Awaitable[BrokerAnswer]]:
    return lambda name: ask(name, wait_ms)


@dataclass
class ProxyProcess(HttpProcess):
    ready_path = "/healthz"

    way: str = "in-turn"
    turn_ms: int = 250
    etcd: str = ""
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> ProxyProcess:
        command = [sys.executable, __file__, "--serve-proxy", self.way, "--turn-ms"]
        command += [str(self.turn_ms), "--etcd", self.etcd, "--port", str(self.port)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(self.ready)
        return self


# ==================================================================== load


class Load:
    """Consumers that loop receive + ack through the proxy in threads of their own, and paced
    senders: every body's send time, first delivery attempt and first receive time."""

    def __init__(self, url: str, group: str, topic: str, max_messages: int = 16) -> None:
        self.url, self.group, self.topic = url, group, topic
        self.max_messages = max_messages
        self.lock = threading.Lock()
        self.sent_at: dict[int, float] = {}
        self.first_attempt: dict[int, int] = {}
        self.latency_ms: dict[int, float] = {}
        self.deliveries = 0
        self.receives = 0
        self.stopping = threading.Event()
        self.consumers: list[threading.Thread] = []

    def start_consumers(self, count: int) -> None:
        for _ in range(count):
            thread = threading.Thread(target=self._consume, daemon=True)
            thread.start()
            self.consumers.append(thread)

    def _consume(self) -> None:
        path = f"/v1/groups/{self.group}/topics/{self.topic}/receive"
        ask = {"max_messages": self.max_messages, "wait_ms": WAIT_MS, "invisible_ms": INVISIBLE_MS}
        with httpx.Client(base_url=self.url, timeout=60) as http:
            while not self.stopping.is_set():
                answer = http.post(path, json=ask)
                assert answer.status_code == 200, answer.text
                messages = answer.json()["messages"]
                self._note(messages, time.monotonic())
                if messages:
                    handles = [m["receipt_handle"] for m in messages]
                    acks = {"receipt_handles": handles}
                    acked = http.post(f"/v1/groups/{self.group}/acks", json=acks)
                    assert acked.status_code == 200, acked.text

    def _note(self, messages: list[dict[str, Any]], now: float) -> None:
        with self.lock:
            self.receives += 1
            for message in messages:
                index = int(message["body"])
                self.deliveries += 1
                if index not in self.first_attempt:
                    self.first_attempt[index] = int(message["delivery_attempt"])
                    self.latency_ms[index] = (now - self.sent_at[index]) * 1000

    def send_paced(
        self, count: int, burst: int, every_s: float, queues: Sequence[int], senders: int
    ) -> None:
        """``count`` bodies in bursts of ``burst``, one burst every ``every_s``; body ``i`` to
        ``queues[i % len(queues)]``."""
        start = time.monotonic()

        def send_some(first: int) -> None:
            with httpx.Client(base_url=self.url, timeout=60) as http:
                for index in range(first, count, senders):
                    delay = start + (index // burst) * every_s - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    with self.lock:
                        self.sent_at[index] = time.monotonic()
                    body = {"body": str(index), "queue_id": queues[index % len(queues)]}
                    answer = http.post(f"/v1/topics/{self.topic}/messages", json=body)
                    assert answer.status_code == 201, answer.text

        threads = [threading.Thread(target=send_some, args=(k,)) for k in range(senders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def wait_for_all(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.first_attempt) < count and time.monotonic() < deadline:
            time.sleep(0.05)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.consumers:
            thread.join(timeout=60)


def handed_out(brokers: Sequence[str]) -> int:
    total = 0
    for url in brokers:
        for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
            if line.startswith("spoolmq_pop_received_total "):
                total += int(float(line.split()[1]))
    return total


@dataclass
class Figures:
    way: str
    bodies: int
    seen: int
    late: int
    repeated: int
    not_answered: int
    p50_ms: float
    p99_ms: float
    receives_per_message: float
    sparse_p50_ms: float = 0.0
    sparse_p99_ms: float = 0.0
    sparse_max_ms: float = 0.0


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def create_topic(url: str, topic: str) -> None:
    created = httpx.put(f"{url}/v1/topics/{topic}", json={"write_queue_nums": QUEUES}, timeout=60)
    assert created.status_code == 201, created.text


def load_run(url: str, brokers: Sequence[str], name: str, args: argparse.Namespace) -> Figures:
    create_topic(url, f"Load{name}")
    before = handed_out(brokers)
    load = Load(url, f"Workers{name}", f"Load{name}", args.max_messages)
    load.start_consumers(args.workers)
    try:
        every_s = args.burst / args.rate
        load.send_paced(args.messages, args.burst, every_s, range(QUEUES), senders=4)
        load.wait_for_all(args.messages, 25)
    finally:
        load.stop()
    out = handed_out(brokers) - before
    latencies = list(load.latency_ms.values())
    return Figures(
        way=name,
        bodies=args.messages,
        seen=len(load.first_attempt),
        late=sum(1 for attempt in load.first_attempt.values() if attempt > 1),
        repeated=load.deliveries - len(load.first_attempt),
        not_answered=out - load.deliveries,
        p50_ms=statistics.median(latencies) if latencies else float("nan"),
        p99_ms=percentile(latencies, 0.99),
        receives_per_message=load.receives / max(1, args.messages),
    )


def sparse_run(url: str, name: str, figures: Figures, count: int) -> None:
    create_topic(url, f"Sparse{name}")
    load = Load(url, f"Sparse{name}", f"Sparse{name}")
    load.start_consumers(1)
    try:
        time.sleep(0.5)  # parked
        where = random.Random(7)  # the same groups, in the same order, for every way
        queues = [where.choice((0, 4)) for _ in range(count)]
        load.send_paced(count, 1, 0.15, queues, senders=1)
        load.wait_for_all(count, 10)
    finally:
        load.stop()
    latencies = list(load.latency_ms.values())
    figures.sparse_p50_ms = statistics.median(latencies)
    figures.sparse_p99_ms = percentile(latencies, 0.99)
    figures.sparse_max_ms = max(latencies)


# ==================================================================== the run


@contextlib.contextmanager
def two_groups(root: Path) -> Iterator[tuple[str, list[str]]]:
    etcd, etcd_url = start_etcd(root)
    brokers = []
    try:
        for name in ("g1", "g2"):
            brokers.append(broker(f"{name}-a", name, root, etcd_url).start())
        yield etcd_url, [b.url for b in brokers]
    finally:
        for server in brokers:
            server.stop()
        etcd.terminate()
        etcd.wait(timeout=30)


def masters_known(url: str) -> bool:
    return all(httpx.get(f"{url}/healthz").json()["masters"].values())


def show(figures: Figures) -> str:
    return (
        f"{figures.way:<16} {figures.seen:>6}/{figures.bodies:<6} {figures.late:>6} "
        f"{figures.repeated:>8} {figures.not_answered:>9} {figures.p50_ms:>8.1f} "
        f"{figures.p99_ms:>8.1f} {figures.receives_per_message:>9.3f} "
        f"{figures.sparse_p50_ms:>8.1f} {figures.sparse_p99_ms:>8.1f} {figures.sparse_max_ms:>8.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--rate", type=float, default=200.0, help="sends per second")
    parser.add_argument("--burst", type=int, default=40, help="bodies sent at once")
    parser.add_argument("--max-messages", type=int, default=16, help="of each receive")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--sparse", type=int, default=40, help="messages of the sparse part")
    parser.add_argument("--turns", default="250", help="in-turn turns to run, ms, comma-separated")
    parser.add_argument("--ways", default=",".join(WAYS))
    parser.add_argument("--serve-proxy", choices=WAYS, help=argparse.SUPPRESS)
    parser.add_argument("--turn-ms", type=int, default=250, help=argparse.SUPPRESS)
    parser.add_argument("--etcd", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_proxy:
        return serve_proxy(args.serve_proxy, args.turn_ms, args.etcd, args.port)
    runs: list[tuple[str, int]] = []
    for way in args.ways.split(","):
        turns = [int(t) for t in args.turns.split(",")] if way == "in-turn" else [0]
        runs += [(way, turn) for turn in turns]
    print(
        f"{args.messages} bodies at {args.rate:g}/s in bursts of {args.burst} over both "
        f"groups, {args.workers} workers "
        f"(receive {args.max_messages}, wait_ms {WAIT_MS}, invisible_ms {INVISIBLE_MS}); sparse: "
        f"{args.sparse} bodies 150 ms apart, one worker"
    )
    print(
        f"{'way':<16} {'seen':>13} {'late':>6} {'repeated':>8} {'unanswrd':>9} {'p50 ms':>8} "
        f"{'p99 ms':>8} {'recv/msg':>9} {'sp p50':>8} {'sp p99':>8} {'sp max':>8}"
    )
    with tempfile.TemporaryDirectory() as tmp, two_groups(Path(tmp)) as (etcd, brokers):
        for way, turn in runs:
            name = f"{way}-{turn}" if turn else way
            proxy = ProxyProcess(way=way, turn_ms=turn or 250, etcd=etcd).start()
            try:
                wait_for(functools.partial(masters_known, proxy.url))
                figures = load_run(proxy.url, brokers, name.replace("-", ""), args)
                figures.way = name
                sparse_run(proxy.url, name.replace("-", ""), figures, args.sparse)
            finally:
                proxy.stop()
            print(show(figures), flush=True)
    print(
        "late: first seen with delivery_attempt >= 2; repeated: deliveries beyond the first; "
        "unanswrd: handed out by the brokers, never answered to a consumer"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

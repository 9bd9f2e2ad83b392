"""SQL92 property filters: what one costs per message, and a filtered pull against a plain one.

1. Evaluation: a five-clause filter (``region = 'eu' AND amount > 100 AND tier IN ('gold',
   'silver') AND NOT (channel = 'test') AND sku STARTSWITH 'A'``) compiled once
   (``storage.sql92.Sql92Filter``) and run over property maps of 1,000 messages, against a
   hand-written Python function of the same five clauses and RocketMQ's null and conversion
   rules (the least a Python evaluator can cost).
2. Store pull: ``MessageStore.get_message`` in 32-message batches over a queue whose messages
   match a 10 %-selective filter (``region = 'eu'``), against the same pull without a filter
   (in messages scanned per second, and matching messages delivered per second).
3. Group pull over HTTP: a ``spoolmq serve`` process, a 4-queue topic of 1 KiB messages, 10 %
   with ``region = 'eu'``; one keep-alive client walks the whole topic with group pulls of 32
   (``auto_commit``), with that filter and without (a fresh group each time), alternating:
   the topic's messages walked per second, and the matching ones delivered per second.
4. A parked long-poll: 2,000 single sends that do not match (``region = 'us'``) while four
   group pulls with ``region = 'eu'`` and ``wait_ms`` wait on the topic, against the same
   sends with no one waiting: the broker's CPU per send. A waiter wakes for an arrival its
   tags allow, reads it, finds no match and parks again; this is what that costs.

Run by hand (not part of the test suite)::

    uv run python bench/filter_bench.py                 # 200k messages
    uv run python bench/filter_bench.py --count 500000

Prints each figure and its ratio to the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from failover_bench import Server

from storage import GetMessageStatus, MessageStore, StoreConfig
from storage.record.message import Message
from storage.sql92 import Sql92Filter

FIVE_CLAUSES = (
    "region = 'eu' AND amount > 100 AND tier IN ('gold', 'silver') "
    "AND NOT (channel = 'test') AND sku STARTSWITH 'A'"
)


def by_hand(properties: Mapping[str, str]) -> bool:
    """The five clauses written out: a missing property or a bad number is no match."""
    if properties.get("region") != "eu":
        return False
    amount = properties.get("amount")
    if amount is None:
        return False
    try:
        if not int(amount) > 100:
            return False
    except ValueError:
        return False
    if properties.get("tier") not in ("gold", "silver"):
        return False
    channel = properties.get("channel")
    if channel is None or channel == "test":
        return False
    sku = properties.get("sku")
    return sku is not None and sku.startswith("A")


def sample_properties(rng: random.Random) -> dict[str, str]:
    return {
        "region": rng.choice(["eu", "us", "ap"]),
        "amount": str(rng.randrange(0, 300)),
        "tier": rng.choice(["gold", "silver", "bronze"]),
        "channel": rng.choice(["web", "app", "test"]),
        "sku": rng.choice(["A-1", "B-2", "A-7", "C-3"]),
        "TAGS": "order",
    }


def per_message_us(test: Callable[[Mapping[str, str]], bool], maps: list[dict[str, str]]) -> float:
    """Best of 5 rounds over ``maps``, µs per message."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for properties in maps:
            test(properties)
        best = min(best, time.perf_counter() - start)
    return best / len(maps) * 1e6


def evaluation(rounds: int) -> None:
    rng = random.Random(7)
    maps = [sample_properties(rng) for _ in range(1000)]
    compiled = Sql92Filter(FIVE_CLAUSES)
    assert all(compiled.matches(p) == by_hand(p) for p in maps)
    results = []
    for _ in range(rounds):
        results.append((per_message_us(by_hand, maps), per_message_us(compiled.matches, maps)))
    hand = min(r[0] for r in results)
    sql = min(r[1] for r in results)
    print("1. evaluation of a five-clause filter, µs per message (best of the rounds)")
    print(f"   by hand    {hand:7.3f} µs")
    print(f"   Sql92Filter {sql:6.3f} µs   {sql / hand:.2f}x the hand-written function")


def store_pull(count: int, root: Path) -> None:
    config = StoreConfig(commit_log_file_size=256 * 1024 * 1024)
    store = MessageStore.open(root / "store", config)
    try:
        rng = random.Random(11)
        body = b"x" * 200
        batch: list[Message] = []
        for i in range(count):
            region = "eu" if i % 10 == 0 else rng.choice(["us", "ap"])
            properties = {"region": region, "amount": str(i % 300), "TAGS": "order"}
            batch.append(Message(topic="F", body=body, queue_id=0, properties=properties))
            if len(batch) == 100:
                store.put(batch)
                batch = []
        if batch:
            store.put(batch)
        sql = Sql92Filter("region = 'eu'")

        def pull_all(matches: Callable[[Mapping[str, str]], bool] | None) -> tuple[float, int]:
            start = time.perf_counter()
            offset = delivered = 0
            while True:
                result = store.get_message(
                    "g", "F", 0, offset, 32, views=True, property_filter=matches
                )
                if result.status not in (
                    GetMessageStatus.FOUND,
                    GetMessageStatus.NO_MATCHED_MESSAGE,
                ):
                    break
                delivered += len(result.views)
                if result.next_begin_offset == offset:
                    break
                offset = result.next_begin_offset
                if offset >= count:
                    break
            return time.perf_counter() - start, delivered

        rows = []
        for round_ in range(3):
            order = [None, sql.matches] if round_ % 2 == 0 else [sql.matches, None]
            timings = {}
            for matches in order:
                timings[matches is None] = pull_all(matches)
            rows.append(timings)
        plain = min(r[True][0] for r in rows)
        filtered = min(r[False][0] for r in rows)
        matched = rows[0][False][1]
        print(f"2. store pull of {count:,} messages, 32 a batch, views (best of 3 rounds)")
        print(f"   no filter           {count / plain:>12,.0f} messages/s")
        print(
            f"   region = 'eu' (10 %) {count / filtered:>11,.0f} scanned/s "
            f"{matched / filtered:>10,.0f} delivered/s   scanned {plain / filtered:.2f}x "
            "the unfiltered pull"
        )
    finally:
        store.close()


def group_pull(count: int, root: Path) -> None:
    server = Server("filter-bench", root / "broker", []).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            client.put("/v1/topics/G", json={"write_queue_nums": 4, "read_queue_nums": 4})
            body = "x" * 1024
            for start in range(0, count, 100):
                messages = [
                    {"body": body, "properties": {"region": "eu" if i % 10 == 0 else "us"}}
                    for i in range(start, start + 100)
                ]
                client.post("/v1/topics/G/messages", json={"messages": messages}).raise_for_status()

            def walk(group: str, sql: str | None) -> tuple[float, int]:
                params: dict[str, str | int] = {"max_messages": 32, "auto_commit": "true"}
                if sql is not None:
                    params["filter"] = sql
                delivered = idle = 0
                started = time.perf_counter()
                while idle < 2:
                    answer = client.get(f"/v1/groups/{group}/topics/G/messages", params=params)
                    found = answer.json()
                    delivered += len(found["messages"])
                    walked = all(q["next_offset"] >= q["max_offset"] for q in found["queues"])
                    idle = idle + 1 if walked and not found["messages"] else 0
                return time.perf_counter() - started, delivered

            rows = []
            for round_ in range(3):
                order = [None, "region = 'eu'"] if round_ % 2 == 0 else ["region = 'eu'", None]
                timings = {sql is None: walk(f"g{round_}{sql is None}", sql) for sql in order}
                rows.append(timings)
        plain = min(r[True][0] for r in rows)
        filtered = min(r[False][0] for r in rows)
        matched = rows[0][False][1]
        print(f"3. group pull over HTTP, {count:,} x 1 KiB in 4 queues (best of 3 rounds)")
        print(f"   no filter            {count / plain:>10,.0f} messages/s")
        print(
            f"   region = 'eu' (10 %) {count / filtered:>10,.0f} walked/s "
            f"{matched / filtered:>9,.0f} delivered/s   walked {plain / filtered:.2f}x "
            "the unfiltered pull"
        )
    finally:
        server.stop()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parked_long_poll(root: Path, sends: int = 2000) -> None:
    server = Server("filter-park", root / "park", []).start()
    assert server.process is not None
    pid = server.process.pid
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            client.put("/v1/topics/P", json={"write_queue_nums": 4, "read_queue_nums": 4})
            us = {"body": "x" * 1024, "properties": {"region": "us"}}

            def send_all() -> float:
                before = cpu_seconds(pid)
                for _ in range(sends):
                    client.post("/v1/topics/P/messages", json=us).raise_for_status()
                return (cpu_seconds(pid) - before) / sends * 1e6

            def waiter(index: int, stop: threading.Event) -> None:
                params: dict[str, str | int] = {
                    "filter": "region = 'eu'",
                    "wait_ms": 2000,
                    "auto_commit": "true",
                }
                with httpx.Client(base_url=server.url, timeout=60) as own:
                    while not stop.is_set():
                        own.get(f"/v1/groups/w{index}/topics/P/messages", params=params)

            rows = []
            for round_ in range(3):
                measured = {}
                for waiting in [False, True] if round_ % 2 == 0 else [True, False]:
                    stop = threading.Event()
                    threads = [
                        threading.Thread(target=waiter, args=(i, stop))
                        for i in range(4 if waiting else 0)
                    ]
                    for thread in threads:
                        thread.start()
                    time.sleep(0.5)
                    measured[waiting] = send_all()
                    stop.set()
                    for thread in threads:
                        thread.join()
                rows.append(measured)
        alone = min(r[False] for r in rows)
        parked = min(r[True] for r in rows)
        print(f"4. {sends:,} sends that do not match, the broker's CPU per send (best of 3)")
        print(f"   no one waiting           {alone:7.0f} µs")
        print(
            f"   4 filtered long-polls    {parked:7.0f} µs   {parked / alone:.2f}x "
            "(each wake: a read, no match, parked again)"
        )
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(
        f"filter bench: {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    evaluation(args.rounds)
    root = Path(tempfile.mkdtemp(prefix="spoolmq-filter-bench-"))
    try:
        store_pull(args.count, root)
        group_pull(min(args.count, 50_000), root)
        parked_long_poll(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

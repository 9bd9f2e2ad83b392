"""POP consumption (receive + ack) against offset consumption (pull + commit), same run.

Against a ``spoolmq serve`` process started here on 127.0.0.1 (pinned to CPU 0 when
``taskset`` exists; the clients run in this process, on CPU 1, with httpx — the throughput
figures include the client's cost, equally for both ways):

1. Throughput: 8 workers consume the same N x 1 KiB messages twice — as one POP group
   (``receive`` 16, then ``acks`` of the 16 handles) and as an offsets group (each worker owns
   one of the 8 queues: ``pull`` 16, then ``PUT .../offset``). Messages/s of each and their
   ratio (target: POP >= 0.5x offsets).
2. Round trip: with 100 receivers parked (long-polling an empty topic), one client receives a
   message and acks it; p50/p99 of receive start -> ack answer (target p99 <= 5 ms).

Run by hand (not part of the test suite)::

    uv run python bench/pop_bench.py
    uv run python bench/pop_bench.py --messages 40000 --rounds 2000 --flush sync
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from http_bench import Connection  # bench/ is on sys.path when this file runs

BIN = Path(sys.executable).parent
BODY_1K = "x" * 1024
QUEUES = 8
WORKERS = 8
BATCH = 16


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(cpu: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(cpu)]
    return []


@contextlib.contextmanager
def server(store: Path, port: int, flush: str) -> Iterator[str]:
    command = [
        *pinned(0),
        str(BIN / "spoolmq"),
        "serve",
        "--store-dir",
        str(store),
        "--port",
        str(port),
        "--flush",
        flush,
        "--log-level",
        "warning",
    ]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start")
            time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=60)


async def fill(client: httpx.AsyncClient, topic: str, count: int) -> None:
    assert (
        await client.put(
            f"/v1/topics/{topic}", json={"read_queue_nums": QUEUES, "write_queue_nums": QUEUES}
        )
    ).status_code in (200, 201)
    for start in range(0, count, 100):
        messages = [{"body": BODY_1K} for _ in range(min(100, count - start))]
        response = await client.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
        assert response.status_code == 201, response.text


async def pop_worker(client: httpx.AsyncClient, topic: str, done: list[int], total: int) -> None:
    while sum(done) < total:
        response = await client.post(
            f"/v1/groups/pop-bench/topics/{topic}/receive",
            json={"max_messages": BATCH, "invisible_ms": 60_000},
        )
        messages = response.json()["messages"]
        if not messages:
            continue
        handles = [m["receipt_handle"] for m in messages]
        acked = await client.post("/v1/groups/pop-bench/acks", json={"receipt_handles": handles})
        assert acked.status_code == 200
        done.append(len(messages))


async def offset_worker(
    client: httpx.AsyncClient, topic: str, queue_id: int, done: list[int], per_queue: int
) -> None:
    taken = 0
    while taken < per_queue:
        response = await client.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages",
            params={"group": "offset-bench", "max_messages": BATCH},
        )
        pulled = response.json()
        if not pulled["messages"]:
            continue
        committed = await client.put(
            f"/v1/groups/offset-bench/topics/{topic}/queues/{queue_id}/offset",
            json={"offset": pulled["next_offset"]},
        )
        assert committed.status_code == 200
        taken += len(pulled["messages"])
        done.append(len(pulled["messages"]))


async def throughput(url: str, count: int) -> tuple[float, float]:
    limits = httpx.Limits(max_connections=WORKERS * 2)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as client:
        await fill(client, "PopBench", count)
        done: list[int] = []
        started = time.perf_counter()
        await asyncio.gather(*(pop_worker(client, "PopBench", done, count) for _ in range(WORKERS)))
        pop_rate = sum(done) / (time.perf_counter() - started)
        done = []
        per_queue = count // QUEUES  # batches of 100 go round the queues evenly
        started = time.perf_counter()
        await asyncio.gather(
            *(offset_worker(client, "PopBench", q, done, per_queue) for q in range(QUEUES))
        )
        offset_rate = sum(done) / (time.perf_counter() - started)
    return pop_rate, offset_rate


async def round_trips(url: str, port: int, rounds: int) -> list[float]:
    """The timed client is a raw keep-alive connection (http_bench's), so that the figure is
    the server's, not httpx's; the 100 idle receivers park for 30 s at a time."""
    async with (
        httpx.AsyncClient(
            base_url=url, timeout=60, limits=httpx.Limits(max_connections=200)
        ) as idle_client,
        httpx.AsyncClient(base_url=url, timeout=60) as client,
    ):
        assert (await client.put("/v1/topics/IdleBench", json={})).status_code in (200, 201)
        await fill(client, "TripBench", rounds)

        async def idle(n: int) -> None:
            with contextlib.suppress(httpx.HTTPError):
                while True:
                    await idle_client.post(
                        f"/v1/groups/idle-{n}/topics/IdleBench/receive", json={"wait_ms": 30_000}
                    )

        parked = [asyncio.create_task(idle(n)) for n in range(100)]
        await asyncio.sleep(1.0)  # let them park
        connection = await Connection.open(port)
        samples = []
        receive = json.dumps({"max_messages": 1}).encode()
        for _ in range(rounds):
            started = time.perf_counter()
            status, answer = await connection.request(
                "POST", "/v1/groups/trip-bench/topics/TripBench/receive", receive
            )
            [message] = json.loads(answer)["messages"]
            ack = json.dumps({"receipt_handles": [message["receipt_handle"]]}).encode()
            status, answer = await connection.request("POST", "/v1/groups/trip-bench/acks", ack)
            samples.append((time.perf_counter() - started) * 1000)
            assert status == 200 and json.loads(answer)["results"][0]["outcome"] == "acked"
        connection.close()
        for task in parked:
            task.cancel()
        await asyncio.gather(*parked, return_exceptions=True)
    return samples


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--flush", choices=("async", "sync"), default="async")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        os.sched_setaffinity(0, {1})  # the clients on CPU 1, the server on CPU 0
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp, server(Path(tmp), port, args.flush) as url:
        pop_rate, offset_rate = asyncio.run(throughput(url, args.messages))
        samples = asyncio.run(round_trips(url, port, args.rounds))
    print(f"flush {args.flush}, {args.messages} x 1 KiB, {WORKERS} workers, batches of {BATCH}")
    print(f"receive + ack:  {pop_rate:,.0f} msgs/s")
    print(f"pull + commit:  {offset_rate:,.0f} msgs/s")
    print(f"ratio:          {pop_rate / offset_rate:.2f}x (target >= 0.5x)")
    print(
        f"receive -> ack round trip, 100 parked: p50 {statistics.median(samples):.2f} ms, "
        f"p99 {percentile(samples, 99):.2f} ms (target p99 <= 5 ms)"
    )


if __name__ == "__main__":
    main()

"""HTTP throughput and long-poll wake latency of spoolmq, next to a same-run FastAPI baseline.

Both servers run on the same stack (uvicorn, one worker, uvloop + httptools), each pinned to
CPU 0 when ``taskset`` exists; the load generator (``wrk``) runs on CPU 1. The baseline is a
minimal FastAPI app that parses an equal JSON body (a pydantic model) and answers a small JSON.

1. Single send: ``POST /v1/topics/B/messages`` with one 1 KiB message, requests/s,
   against the baseline's POST requests/s (target >= 0.7x).
2. Batch send: 100 x 1 KiB messages per request, messages/s (target >= 100,000).
3. Pull: 32 x 1 KiB messages per request from random offsets, messages/s (target >= 150,000).
4. Wake latency: 100 consumers parked on 100 queues of one topic; a producer sends to one queue
   at a time and measures send start -> that consumer's answer; p50/p99 (target p99 <= 5 ms),
   against the baseline's POST round trip on the same raw-socket client.

Run by hand (not part of the test suite; needs ``wrk``: ``apt-get install -y wrk``)::

    uv run python bench/http_bench.py                 # 5 s per throughput run
    uv run python bench/http_bench.py --duration 10 --rounds 2000 --repeat 3
    uv run python bench/http_bench.py --server-arg=--no-message-index-enable
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BODY_1K = "x" * 1024

BASELINE_APP = """
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    body: str = ""
    tags: str | None = None
    keys: list[str] = []
    queue_id: int | None = None

app = FastAPI()

@app.post("/echo", status_code=201)
async def echo(message: Message) -> dict[str, object]:
    return {"msg_id": "7F00000100002A9F0000000000000000", "queue_id": 0, "queue_offset": 1}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(cpu: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(cpu)]
    return []


@contextlib.contextmanager
def server(command: list[str], url: str, ready_path: str, cwd: Path) -> Iterator[None]:
    process = subprocess.Popen(
        [*pinned(0), *command], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + ready_path, timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{command[0]} did not start")
            time.sleep(0.1)
        yield
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wrk(url: str, script: str, duration: int, connections: int, workdir: Path) -> float:
    """Requests per second that wrk reaches with ``script``; fails on non-2xx answers."""
    path = workdir / "script.lua"
    path.write_text(script)
    result = subprocess.run(
        [
            *pinned(1),
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{duration}s",
            "--timeout",
            "10s",
            "-s",
            str(path),
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=duration + 60,
    )
    if "Non-2xx" in result.stdout or "Socket errors" in result.stdout:
        raise RuntimeError(f"wrk saw errors:\n{result.stdout}")
    match = re.search(r"Requests/sec:\s+([\d.]+)", result.stdout)
    if match is None:
        raise RuntimeError(result.stdout + result.stderr)
    return float(match.group(1))


def post_script(path: str, body: str) -> str:
    return textwrap.dedent(
        f"""
        wrk.method = "POST"
        wrk.path = "{path}"
        wrk.body = {json.dumps(body)}
        wrk.headers["Content-Type"] = "application/json"
        """
    )


def pull_script(topic: str, count: int) -> str:
    return textwrap.dedent(
        f"""
        math.randomseed(7)
        local path = "/v1/topics/{topic}/queues/0/messages?max_messages=32&offset="
        request = function()
            return wrk.format("GET", path .. math.random(0, {count - 33}))
        end
        """
    )


# ==================================================================== raw HTTP client


class Connection:
    """A keep-alive HTTP/1.1 connection with just enough parsing for the latency runs."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.transport.get_extra_info("socket").setsockopt(
            socket.IPPROTO_TCP, socket.TCP_NODELAY, 1
        )
        return cls(reader, writer)

    def send(self, method: str, path: str, body: bytes = b"") -> None:
        head = f"{method} {path} HTTP/1.1\r\nHost: b\r\nContent-Length: {len(body)}\r\n"
        if body:
            head += "Content-Type: application/json\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)

    async def answer(self) -> tuple[int, bytes]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        return status, await self.reader.readexactly(length)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        self.send(method, path, body)
        return await self.answer()

    def close(self) -> None:
        self.writer.close()


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def baseline_latency(port: int, rounds: int) -> list[float]:
    connection = await Connection.open(port)
    body = json.dumps({"body": BODY_1K, "tags": "T", "queue_id": 0}).encode()
    samples = []
    for round_ in range(100 + rounds):  # the first 100 warm up
        start = time.perf_counter()
        status, _ = await connection.request("POST", "/echo", body)
        if round_ >= 100:
            samples.append(time.perf_counter() - start)
        assert status == 201
    connection.close()
    return samples


async def wake_latency(port: int, rounds: int, consumers: int) -> list[float]:
    """Send to one queue at a time while ``consumers`` pulls are parked, one per queue."""
    topic = "Wake"
    setup = await Connection.open(port)
    queues = json.dumps({"read_queue_nums": consumers, "write_queue_nums": consumers}).encode()
    status, _ = await setup.request("PUT", f"/v1/topics/{topic}", queues)
    assert status in (200, 201)
    connections = [await Connection.open(port) for _ in range(consumers)]
    sent_at: dict[int, float] = {}
    woken: dict[int, asyncio.Future[float]] = {}
    loop = asyncio.get_running_loop()

    async def consume(queue_id: int, connection: Connection) -> None:
        offset = 0
        while True:
            path = f"/v1/topics/{topic}/queues/{queue_id}/messages"
            connection.send("GET", f"{path}?offset={offset}&wait_ms=30000")
            status, body = await connection.answer()
            now = time.perf_counter()
            assert status == 200
            answer = json.loads(body)
            if answer["messages"]:
                woken[queue_id].set_result(now - sent_at[queue_id])
            offset = answer["next_offset"]

    tasks = [asyncio.create_task(consume(q, c)) for q, c in enumerate(connections)]
    await wait_parked(setup, consumers)
    producer = await Connection.open(port)
    message = json.dumps({"body": "wake", "queue_id": 0}).encode()
    samples = []
    warm_up = consumers  # one round per queue first, not measured
    for round_ in range(warm_up + rounds):
        queue_id = round_ % consumers
        woken[queue_id] = loop.create_future()
        body = message.replace(b'"queue_id": 0', f'"queue_id": {queue_id}'.encode())
        sent_at[queue_id] = time.perf_counter()
        status, _ = await producer.request("POST", f"/v1/topics/{topic}/messages", body)
        assert status == 201
        latency = await asyncio.wait_for(woken[queue_id], 10)
        if round_ >= warm_up:
            samples.append(latency)
        if queue_id == consumers - 1:
            await wait_parked(setup, consumers)
    for task in tasks:
        task.cancel()
    for connection in [*connections, producer, setup]:
        connection.close()
    return samples


async def wait_parked(connection: Connection, count: int) -> None:
    for _ in range(5000):
        _, body = await connection.request("GET", "/metrics")
        match = re.search(rb"spoolmq_long_polls_parked (\d+)", body)
        if match and int(match.group(1)) >= count:
            return
        await asyncio.sleep(0.002)
    raise RuntimeError("consumers did not park")


# ==================================================================== main


def fill(url: str, topic: str, count: int) -> None:
    batch = {"messages": [{"body": BODY_1K} for _ in range(100)], "queue_id": 0}
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(count // 100):
            assert client.post(f"/v1/topics/{topic}/messages", json=batch).status_code == 201


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    """One full run: baseline, then spoolmq on a fresh store."""
    figures: dict[str, float] = {}
    (workdir / "baseline_app.py").write_text(BASELINE_APP)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    uvicorn = [str(BIN / "uvicorn"), "baseline_app:app", "--port", str(port)]
    uvicorn += ["--loop", "uvloop", "--http", "httptools", "--log-level", "warning"]
    uvicorn += ["--no-access-log", "--workers", "1"]
    one = json.dumps({"body": BODY_1K, "tags": "TagA", "keys": ["k1"], "queue_id": 0})
    with server(uvicorn, url, "/docs", workdir):
        wrk(url, post_script("/echo", one), 1, args.connections, workdir)  # warm up
        figures["baseline_rps"] = wrk(
            url, post_script("/echo", one), args.duration, args.connections, workdir
        )
        latency = asyncio.run(baseline_latency(port, args.rounds))
        figures["baseline_p50_ms"] = statistics.median(latency) * 1000
        figures["baseline_p99_ms"] = percentile(latency, 99) * 1000

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = workdir / "store"
    shutil.rmtree(store, ignore_errors=True)
    spoolmq = [str(BIN / "spoolmq"), "serve", "--store-dir", str(store)]
    spoolmq += ["--port", str(port), "--log-level", "warning", *args.server_arg]
    with server(spoolmq, url, "/readyz", workdir):
        send_one = post_script("/v1/topics/B/messages", one)
        wrk(url, send_one, 1, args.connections, workdir)  # warm up
        figures["send_rps"] = wrk(url, send_one, args.duration, args.connections, workdir)
        batch = json.dumps({"messages": [{"body": BODY_1K} for _ in range(100)], "queue_id": 1})
        send_batch = post_script("/v1/topics/B/messages", batch)
        batch_rps = wrk(url, send_batch, args.duration, args.connections, workdir)
        figures["batch_msgs_per_s"] = batch_rps * 100
        fill(url, "P", 20_000)
        pull_rps = wrk(url, pull_script("P", 20_000), args.duration, args.connections, workdir)
        figures["pull_msgs_per_s"] = pull_rps * 32
        samples = asyncio.run(wake_latency(port, args.rounds, args.consumers))
        figures["wake_p50_ms"] = statistics.median(samples) * 1000
        figures["wake_p99_ms"] = percentile(samples, 99) * 1000
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per throughput run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1000, help="wake-latency samples")
    parser.add_argument("--consumers", type=int, default=100)
    parser.add_argument(
        "--repeat", type=int, default=1, help="full runs; each figure is their median"
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra `spoolmq serve` flag, e.g. --server-arg=--no-message-index-enable",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is missing: apt-get install -y wrk", file=sys.stderr)
        return 2
    workdir = Path(tempfile.mkdtemp(prefix="spoolmq-http-bench-"))
    runs = []
    try:
        for run in range(args.repeat):
            runs.append(measure(args, workdir))
            if args.repeat > 1:
                print(f"run {run + 1}: " + ", ".join(f"{k} {v:,.2f}" for k, v in runs[-1].items()))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
    median["send_ratio"] = statistics.median(run["send_rps"] / run["baseline_rps"] for run in runs)
    report(median, args)
    return 0


def report(f: dict[str, float], args: argparse.Namespace) -> None:
    cpu = platform.processor() or platform.machine()
    print(f"spoolmq HTTP bench: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}")
    print(f"wrk -t1 -c{args.connections} -d{args.duration}s; servers on CPU 0, wrk on CPU 1")
    if args.server_arg:
        print(f"spoolmq serve {' '.join(args.server_arg)}")
    if args.repeat > 1:
        print(f"median of {args.repeat} runs for each figure (ratios: median of per-run ratios)")
    base = f["baseline_rps"]
    print(f"baseline FastAPI POST (1 KiB JSON)  {base:>12,.0f} req/s")
    print(
        f"single send (1 x 1 KiB)             {f['send_rps']:>12,.0f} req/s   "
        f"{f.get('send_ratio', f['send_rps'] / base):.2f}x baseline (target >= 0.70x)"
    )
    print(
        f"batch send (100 x 1 KiB)            {f['batch_msgs_per_s']:>12,.0f} msg/s   "
        f"{f['batch_msgs_per_s'] / 100 / base:.2f}x baseline req/s (target >= 100,000 msg/s)"
    )
    print(
        f"pull (32 x 1 KiB)                   {f['pull_msgs_per_s']:>12,.0f} msg/s   "
        f"{f['pull_msgs_per_s'] / 32 / base:.2f}x baseline req/s (target >= 150,000 msg/s)"
    )
    print(
        f"wake latency, {args.consumers} parked            p50 {f['wake_p50_ms']:.2f} ms  "
        f"p99 {f['wake_p99_ms']:.2f} ms (target p99 <= 5 ms); baseline POST round trip "
        f"p50 {f['baseline_p50_ms']:.2f} ms p99 {f['baseline_p99_ms']:.2f} ms "
        f"({f['wake_p99_ms'] / f['baseline_p99_ms']:.1f}x at p99)"
    )


if __name__ == "__main__":
    random.seed(7)
    sys.exit(main())

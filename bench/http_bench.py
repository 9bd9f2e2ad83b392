"""HTTP throughput and long-poll wake latency of spoolmq, next to same-run peers.

Every server runs pinned to CPU 0 when ``taskset`` exists; the load generator runs on CPU 1.
Peers, measured in the same run:

- a minimal FastAPI app on the same stack (spoolmq's HTTP server, uvloop + httptools) that
  parses an equal JSON body (pydantic models) and answers a small JSON: one message, or a batch
  of 100;
- Redis Streams (Debian's ``redis-server``, AOF with ``appendfsync everysec``, no RDB) driven by
  redis-py + hiredis on one connection: ``XADD`` pipelined x100 (produce), and
  ``XREADGROUP COUNT 32`` + ``XACK`` of the batch read before, one round trip per batch
  (consume). Skipped with a message when ``redis-server`` or redis-py is missing.

1. Single send: ``POST /v1/topics/B/messages`` with one 1 KiB message, requests/s,
   against the baseline's POST requests/s (target >= 0.9x).
2. Batch send: 100 x 1 KiB messages per request, messages/s, against Redis XADD x100
   (target >= 1.3x) and the baseline's batch parse (target >= 0.35x).
   The same batch send against a SYNC_FLUSH server (target >= 0.5x the ASYNC figure).
3. Pull: 32 x 1 KiB messages per request from random offsets, messages/s, against Redis
   XREADGROUP + XACK of 32 (target >= 1.3x).
4. Wake latency: 100 consumers parked on 100 queues of one topic; a producer sends to one queue
   at a time and measures send start -> that consumer's answer; p50/p99 (target p99 <= 1 ms),
   against the baseline's POST round trip on the same raw-socket client.

Run by hand (not part of the test suite; ``make bench-http`` installs ``wrk``,
``redis-server`` and redis-py + hiredis into the venv when missing, then runs it)::

    uv run python bench/http_bench.py --repeat 3      # 5 s per throughput run, 3 full runs
    uv run python bench/http_bench.py --duration 10 --rounds 2000 --repeat 3
    uv run python bench/http_bench.py --server-arg=--no-message-index-enable
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
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
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BODY_1K = "x" * 1024
BATCH = {"messages": [{"body": BODY_1K} for _ in range(100)], "queue_id": 1}
REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"

BASELINE_APP = """
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

class Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    body: str = ""
    tags: str | None = None
    keys: list[str] = []
    queue_id: int | None = None

class Batch(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")
    messages: list[Message]
    queue_id: int | None = None

app = FastAPI()

@app.post("/batch", status_code=201)
async def batch(batch: Batch) -> dict[str, object]:
    return {"count": len(batch.messages), "queue_id": 0, "first_offset": 1}

@app.post("/echo", status_code=201)
async def echo(message: Message) -> dict[str, object]:
    return {"msg_id": "7F00000100002A9F0000000000000000", "queue_id": 0, "queue_offset": 1}

if __name__ == "__main__":
    import sys
    from app.server import Server, listen_socket

    Server(app).run([listen_socket("127.0.0.1", int(sys.argv[1]))])
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def python_of(root: Path) -> str:
    """The Python an earlier checkout runs with: its own venv's (``uv sync`` there: its
    dependencies may differ from this one's), else this one."""
    own = root / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def pinned(cpu: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(cpu)]
    return []


@contextlib.contextmanager
def server(
    command: list[str], url: str, ready_path: str, cwd: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """The server process (``taskset`` execs it: the same PID), stopped on exit."""
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
        yield process
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


# ==================================================================== Redis Streams peer


def redis_client_module() -> Any | None:
    """redis-py when installed (a bench-only tool, not a project dependency), else None."""
    try:
        return importlib.import_module("redis")
    except ImportError:
        return None


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[Any]:
    """Debian's redis-server on a free port, AOF everysec, no RDB; yields a redis-py client."""
    redis = redis_client_module()
    assert redis is not None
    port = free_port()
    data = workdir / "redis"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir()
    command = [REDIS_SERVER, "--bind", "127.0.0.1", "--port", str(port), "--dir", str(data)]
    command += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
    process = subprocess.Popen(
        [*pinned(0), *command], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    client = redis.Redis(host="127.0.0.1", port=port, protocol=2)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.ping():
                    break
            except redis.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)
        yield client
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=60)


@contextlib.contextmanager
def on_cpu(cpu: int) -> Iterator[None]:
    """Run this process on one CPU for the block (the Redis client, like wrk, on CPU 1)."""
    if not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def redis_produce(client: Any, duration: float) -> float:
    """Messages/s of XADD pipelined 100 at a time, one connection, for ``duration`` s."""
    fields = {"body": BODY_1K}
    sent = 0
    start = time.perf_counter()
    end = start + duration
    while time.perf_counter() < end:
        pipe = client.pipeline(transaction=False)
        for _ in range(100):
            pipe.xadd("produce", fields)
        pipe.execute()
        sent += 100
    return sent / (time.perf_counter() - start)


def redis_consume(client: Any, count: int, duration: float) -> float:
    """Messages/s of XREADGROUP COUNT 32 with the XACK of the previous batch pipelined ahead.

    The stream holds ``count`` messages; when the group has read them all its last-delivered
    id goes back to 0 and the (acknowledged) entries are delivered again.
    """
    fields = {"body": BODY_1K}
    for _ in range(count // 100):
        pipe = client.pipeline(transaction=False)
        for _ in range(100):
            pipe.xadd("consume", fields)
        pipe.execute()
    client.xgroup_create("consume", "G", id="0")
    read = 0
    pending: list[bytes] = []
    start = time.perf_counter()
    end = start + duration
    while time.perf_counter() < end:
        pipe = client.pipeline(transaction=False)
        if pending:
            pipe.xack("consume", "G", *pending)
        pipe.xreadgroup("G", "c1", {"consume": ">"}, count=32)
        answer = pipe.execute()[-1]
        entries = answer[0][1] if answer else []
        if not entries:
            client.xgroup_setid("consume", "G", id="0")
        pending = [entry_id for entry_id, _ in entries]
        read += len(entries)
    return read / (time.perf_counter() - start)


def measure_redis(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    with redis_server(workdir) as client, on_cpu(1):
        redis_produce(client, 1)  # warm up
        produce = redis_produce(client, args.duration)
        consume = redis_consume(client, 20_000, args.duration)
    return {"redis_xadd_msgs_per_s": produce, "redis_xreadgroup_msgs_per_s": consume}


# ==================================================================== main


def fill(url: str, topic: str, count: int) -> None:
    batch = {"messages": [{"body": BODY_1K} for _ in range(100)], "queue_id": 0}
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(count // 100):
            assert client.post(f"/v1/topics/{topic}/messages", json=batch).status_code == 201


def measure(args: argparse.Namespace, workdir: Path, run: int = 0) -> dict[str, float]:
    """One full run: baseline, then spoolmq on a fresh store (with ``--before-root``, the
    earlier code first on every other run, so neither side always goes second)."""
    figures: dict[str, float] = {}
    (workdir / "baseline_app.py").write_text(BASELINE_APP)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    baseline = [sys.executable, "baseline_app.py", str(port)]
    one = json.dumps({"body": BODY_1K, "tags": "TagA", "keys": ["k1"], "queue_id": 0})
    with server(baseline, url, "/docs", workdir):
        wrk(url, post_script("/echo", one), 1, args.connections, workdir)  # warm up
        figures["baseline_rps"] = wrk(
            url, post_script("/echo", one), args.duration, args.connections, workdir
        )
        batch_body = json.dumps(BATCH)
        wrk(url, post_script("/batch", batch_body), 1, args.connections, workdir)
        batch_rps = wrk(
            url, post_script("/batch", batch_body), args.duration, args.connections, workdir
        )
        figures["baseline_batch_msgs_per_s"] = batch_rps * 100
        latency = asyncio.run(baseline_latency(port, args.rounds))
        figures["baseline_p50_ms"] = statistics.median(latency) * 1000
        figures["baseline_p99_ms"] = percentile(latency, 99) * 1000

    if args.root:
        command, cwd = [sys.executable, "-m", "app.cli"], Path(args.root)
    else:
        command, cwd = [str(BIN / "spoolmq")], workdir

    def measure_before() -> None:
        root = Path(args.before_root)
        before = measure_spoolmq(args, workdir, [python_of(root), "-m", "app.cli"], root)
        figures.update({f"before_{key}": value for key, value in before.items()})

    if args.before_root and run % 2:
        measure_before()
    figures.update(measure_spoolmq(args, workdir, command, cwd))
    figures["sync_batch_msgs_per_s"] = measure_sync_batch(args, workdir, command, cwd)
    if args.before_root and not run % 2:
        measure_before()
    if args.redis:
        figures.update(measure_redis(args, workdir))
    return figures


def measure_spoolmq(
    args: argparse.Namespace, workdir: Path, command: list[str], cwd: Path
) -> dict[str, float]:
    """Send, batch send, pull and wake latency of one spoolmq server on a fresh store."""
    figures: dict[str, float] = {}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = workdir / "store"
    shutil.rmtree(store, ignore_errors=True)
    spoolmq = [*command, "serve", "--store-dir", str(store)]
    spoolmq += ["--port", str(port), "--log-level", "warning", *args.server_arg]
    one = json.dumps({"body": BODY_1K, "tags": "TagA", "keys": ["k1"], "queue_id": 0})
    with server(spoolmq, url, "/readyz", cwd):
        send_one = post_script("/v1/topics/B/messages", one)
        wrk(url, send_one, 1, args.connections, workdir)  # warm up
        figures["send_rps"] = wrk(url, send_one, args.duration, args.connections, workdir)
        send_batch = post_script("/v1/topics/B/messages", json.dumps(BATCH))
        batch_rps = wrk(url, send_batch, args.duration, args.connections, workdir)
        figures["batch_msgs_per_s"] = batch_rps * 100
        fill(url, "P", 20_000)
        pull_rps = wrk(url, pull_script("P", 20_000), args.duration, args.connections, workdir)
        figures["pull_msgs_per_s"] = pull_rps * 32
        samples = asyncio.run(wake_latency(port, args.rounds, args.consumers))
        figures["wake_p50_ms"] = statistics.median(samples) * 1000
        figures["wake_p99_ms"] = percentile(samples, 99) * 1000
    return figures


def measure_sync_batch(
    args: argparse.Namespace, workdir: Path, command: list[str], cwd: Path
) -> float:
    """Batch send messages/s of a SYNC_FLUSH server (each answer waits for the group commit)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = workdir / "store"
    shutil.rmtree(store, ignore_errors=True)
    spoolmq = [*command, "serve", "--store-dir", str(store), "--flush", "sync"]
    spoolmq += ["--port", str(port), "--log-level", "warning", *args.server_arg]
    with server(spoolmq, url, "/readyz", cwd):
        send_batch = post_script("/v1/topics/B/messages", json.dumps(BATCH))
        wrk(url, send_batch, 1, args.connections, workdir)  # warm up
        return wrk(url, send_batch, args.duration, args.connections, workdir) * 100


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per throughput run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1000, help="wake-latency samples")
    parser.add_argument("--consumers", type=int, default=100)
    parser.add_argument(
        "--repeat", type=int, default=3, help="full runs; each figure is their median"
    )
    parser.add_argument(
        "--server-arg",
        action="append",
        default=[],
        help="extra `spoolmq serve` flag, e.g. --server-arg=--no-message-index-enable",
    )
    parser.add_argument(
        "--root",
        help="serve spoolmq from this checkout instead of this one (a snapshot of it: "
        "edits during a run do not leak in)",
    )
    parser.add_argument(
        "--before-root",
        help="a checkout of an earlier spoolmq (e.g. `git archive REV | tar -x -C DIR`) to "
        "measure in the same runs, served from that directory with its own venv when it has "
        "one (`uv sync --frozen` there), else this one",
    )
    parser.add_argument("--no-redis", dest="redis", action="store_false", help="skip Redis")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is missing: `make bench-http` or apt-get install -y wrk", file=sys.stderr)
        return 2
    if args.redis and not (Path(REDIS_SERVER).exists() and redis_client_module()):
        print(
            "Redis Streams peer skipped: it needs Debian's redis-server and redis-py + hiredis "
            "in the venv (`make bench-http` installs both)",
            file=sys.stderr,
        )
        args.redis = False
    workdir = Path(tempfile.mkdtemp(prefix="spoolmq-http-bench-"))
    runs = []
    try:
        for run in range(args.repeat):
            runs.append(with_ratios(measure(args, workdir, run)))
            print(f"run {run + 1}: " + ", ".join(f"{k} {v:,.2f}" for k, v in runs[-1].items()))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report(runs, args)
    return 0


def with_ratios(f: dict[str, float]) -> dict[str, float]:
    """One run's figures plus its same-run ratios (the targets are ratios)."""
    f["send_vs_baseline"] = f["send_rps"] / f["baseline_rps"]
    f["batch_vs_baseline_batch"] = f["batch_msgs_per_s"] / f["baseline_batch_msgs_per_s"]
    if "redis_xadd_msgs_per_s" in f:
        f["batch_vs_redis_xadd"] = f["batch_msgs_per_s"] / f["redis_xadd_msgs_per_s"]
        f["pull_vs_redis_xreadgroup"] = f["pull_msgs_per_s"] / f["redis_xreadgroup_msgs_per_s"]
    f["sync_batch_vs_async_batch"] = f["sync_batch_msgs_per_s"] / f["batch_msgs_per_s"]
    if "before_send_rps" in f:
        for key in ("send_rps", "batch_msgs_per_s", "pull_msgs_per_s"):
            f[f"{key}_vs_before"] = f[key] / f[f"before_{key}"]
    return f


# (label, key, unit, target as "ratio >= x" or "ms <= x", or None)
ROWS: list[tuple[str, str, str, str | None]] = [
    ("baseline FastAPI POST, 1 x 1 KiB", "baseline_rps", "req/s", None),
    ("baseline FastAPI POST, 100 x 1 KiB", "baseline_batch_msgs_per_s", "msg/s", None),
    ("Redis XADD pipelined x100", "redis_xadd_msgs_per_s", "msg/s", None),
    ("Redis XREADGROUP 32 + XACK", "redis_xreadgroup_msgs_per_s", "msg/s", None),
    ("single send, 1 x 1 KiB", "send_rps", "req/s", None),
    ("batch send, 100 x 1 KiB", "batch_msgs_per_s", "msg/s", None),
    ("batch send, SYNC_FLUSH", "sync_batch_msgs_per_s", "msg/s", None),
    ("pull, 32 x 1 KiB", "pull_msgs_per_s", "msg/s", None),
    ("wake latency p50", "wake_p50_ms", "ms", None),
    ("wake latency p99", "wake_p99_ms", "ms", "<= 1.0"),
    ("baseline POST round trip p99", "baseline_p99_ms", "ms", None),
    ("single send / baseline", "send_vs_baseline", "x", ">= 0.9"),
    ("batch send / baseline batch", "batch_vs_baseline_batch", "x", ">= 0.35"),
    ("batch send / Redis XADD x100", "batch_vs_redis_xadd", "x", ">= 1.3"),
    ("pull 32 / Redis XREADGROUP + XACK", "pull_vs_redis_xreadgroup", "x", ">= 1.3"),
    ("batch send SYNC / ASYNC", "sync_batch_vs_async_batch", "x", ">= 0.5"),
    ("before: single send", "before_send_rps", "req/s", None),
    ("before: batch send", "before_batch_msgs_per_s", "msg/s", None),
    ("before: pull 32", "before_pull_msgs_per_s", "msg/s", None),
    ("before: wake latency p99", "before_wake_p99_ms", "ms", None),
    ("single send / before", "send_rps_vs_before", "x", None),
    ("batch send / before", "batch_msgs_per_s_vs_before", "x", None),
    ("pull 32 / before", "pull_msgs_per_s_vs_before", "x", None),
]


def met(value: float, target: str) -> bool:
    op, bound = target.split()
    return value >= float(bound) if op == ">=" else value <= float(bound)


def report(runs: list[dict[str, float]], args: argparse.Namespace) -> None:
    """Median and spread (min-max) of each figure over the runs; ratios are per-run ratios."""
    cpu = platform.processor() or platform.machine()
    print(f"spoolmq HTTP bench: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}")
    print(f"wrk -t1 -c{args.connections} -d{args.duration}s; servers on CPU 0, clients on CPU 1")
    if args.server_arg:
        print(f"spoolmq serve {' '.join(args.server_arg)}")
    print(f"median of {len(runs)} runs [min - max]")
    for label, key, unit, target in ROWS:
        if key not in runs[0]:
            continue
        values = [run[key] for run in runs]
        median, low, high = statistics.median(values), min(values), max(values)
        digits = 2 if unit in ("x", "ms") else 0
        spread = f"[{low:,.{digits}f} - {high:,.{digits}f}]"
        line = f"{label:<36} {median:>12,.{digits}f} {unit:<5} {spread}"
        if target is not None:
            line += f"  target {target}: {'met' if met(median, target) else 'MISSED'}"
        print(line)


if __name__ == "__main__":
    random.seed(7)
    sys.exit(main())

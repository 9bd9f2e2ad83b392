"""Many topics: what a topic costs in disk, creation time, restart time and memory.

Run by hand: ``uv run python bench/scale_bench.py [--topics 100,1000,10000] [--code DIR]``.
For each count, against a fresh store and a real server (``spoolmq serve`` in a child
process, default settings, 127.0.0.1):

1. create the topics one after another (``PUT /v1/topics/{t}``, 8 queues each) and time
   each creation: the mean of the first and of the last 10 %;
2. send one 1-byte message to queue 0 of each (``POST /v1/topics/{t}/messages``);
3. measure the disk the store's files take (allocated blocks, not file lengths), split into
   CommitLog, ConsumeQueues and the rest;
4. stop the server (SIGTERM, a clean stop), start it again and time start to ``/readyz``
   200, then read the server's resident set (VmRSS). The baseline, measured in the same run:
   the same start on an empty store (Python's imports alone take a second or more); the
   best of three of each;
5. time ``GET /v1/topics?limit=100`` (the first page; a server without pagination answers
   every topic), best of 5.

``--code DIR`` runs the server from another source tree (``git archive <commit>`` of the
code before, with this checkout's virtualenv), so before and after are measured in the same
sitting by the same script.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
QUEUES = 8
RESTARTS = 3  # the best of three restarts (and of three empty starts): the machine is shared
SERVE = "import sys; from app.cli import main; sys.exit(main(sys.argv[1:]))"


@dataclass
class Row:
    topics: int
    disk_total: int
    disk_commit_log: int
    disk_consume_queue: int
    create_first_ms: float
    create_last_ms: float
    restart_s: float
    empty_start_s: float
    rss_mib: float
    first_page_ms: float
    first_page_bytes: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Server:
    """``spoolmq serve`` from ``code`` in a child process."""

    def __init__(self, code: Path, store: Path) -> None:
        self.code, self.store = code, store
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start and wait for /readyz; seconds from spawn to ready."""
        env = {**os.environ, "PYTHONPATH": str(self.code)}
        argv = [sys.executable, "-c", SERVE, "serve", "--store-dir", str(self.store)]
        argv += ["--port", str(self.port), "--log-level", "warning"]
        started = time.perf_counter()
        self.process = subprocess.Popen(argv, cwd=self.code, env=env)
        with httpx.Client(base_url=self.url, timeout=5) as client:
            while True:
                try:
                    if client.get("/readyz").status_code == 200:
                        return time.perf_counter() - started
                except httpx.TransportError:
                    pass
                if self.process.poll() is not None or time.perf_counter() - started > 600:
                    raise RuntimeError("the server did not become ready")
                time.sleep(0.01)

    def rss_mib(self) -> float:
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError("no VmRSS")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None


def allocated(path: Path) -> int:
    """Bytes of disk the files under ``path`` take (their blocks)."""
    total = 0
    for directory, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += (Path(directory) / name).lstat().st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def create_topics(client: httpx.Client, names: list[str]) -> list[float]:
    times = []
    for name in names:
        started = time.perf_counter()
        answer = client.put(
            f"/v1/topics/{name}", json={"read_queue_nums": QUEUES, "write_queue_nums": QUEUES}
        )
        times.append(time.perf_counter() - started)
        answer.raise_for_status()
    return times


def send_one_each(client: httpx.Client, names: list[str]) -> None:
    for name in names:
        answer = client.post(f"/v1/topics/{name}/messages", json={"body": "x", "queue_id": 0})
        answer.raise_for_status()


def first_page(client: httpx.Client) -> tuple[float, int]:
    best, size = float("inf"), 0
    for _ in range(5):
        started = time.perf_counter()
        answer = client.get("/v1/topics", params={"limit": 100})
        best = min(best, time.perf_counter() - started)
        answer.raise_for_status()
        size = len(answer.content)
    return best, size


def empty_start(code: Path, scratch: Path) -> float:
    """Spawn to ready on an empty store: the baseline of a restart."""
    store = scratch / "empty"
    server = Server(code, store)
    try:
        return server.start()
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)


def measure(code: Path, count: int, scratch: Path) -> Row:
    store = scratch / f"store-{count}"
    names = [f"Tenant{n:05d}" for n in range(count)]
    server = Server(code, store)
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=120) as client:
            times = create_topics(client, names)
            send_one_each(client, names)
    finally:
        server.stop()
    tenth = max(1, count // 10)
    disk = (allocated(store), allocated(store / "commitlog"), allocated(store / "consumequeue"))
    restarts, baselines = [], []
    try:
        for attempt in range(RESTARTS):
            baselines.append(empty_start(code, scratch))
            restarts.append(server.start())
            if attempt == 0:
                rss = server.rss_mib()
                with httpx.Client(base_url=server.url, timeout=120) as client:
                    page_s, page_bytes = first_page(client)
            server.stop()
    finally:
        server.stop()
        shutil.rmtree(store, ignore_errors=True)
    restart, baseline = min(restarts), min(baselines)
    return Row(
        count,
        *disk,
        statistics.fmean(times[:tenth]) * 1000,
        statistics.fmean(times[-tenth:]) * 1000,
        restart,
        baseline,
        rss,
        page_s * 1000,
        page_bytes,
    )


def mib(value: int) -> str:
    return f"{value / 1024 / 1024:,.1f} MiB"


def print_table(label: str, rows: list[Row]) -> None:
    print(f"\n{label}")
    print(
        "| topics x 8 queues | disk (CommitLog / ConsumeQueue / rest) | create ms, first 10 % "
        "| last 10 % | ratio | restart to ready (empty store) | RSS after restart | first page |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rest = r.disk_total - r.disk_commit_log - r.disk_consume_queue
        print(
            f"| {r.topics:,} | {mib(r.disk_total)} ({mib(r.disk_commit_log)} / "
            f"{mib(r.disk_consume_queue)} / {mib(rest)}) | {r.create_first_ms:.2f} | "
            f"{r.create_last_ms:.2f} | "
            f"{r.create_last_ms / r.create_first_ms:.2f}x | "
            f"{r.restart_s:.2f} s ({r.empty_start_s:.2f} s) | {r.rss_mib:.0f} MiB | "
            f"{r.first_page_ms:.1f} ms, {r.first_page_bytes / 1024:,.1f} KiB |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", default="100,1000,10000", help="comma-separated counts")
    parser.add_argument("--code", type=Path, default=ROOT, help="source tree to serve from")
    parser.add_argument("--label", default="", help="the table's heading")
    args = parser.parse_args()
    counts = [int(n) for n in args.topics.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="scale-bench-") as scratch:
        for count in counts:
            rows.append(measure(args.code.resolve(), count, Path(scratch)))
            print_table(args.label or str(args.code), rows[-1:])
    print_table(args.label or str(args.code), rows)


if __name__ == "__main__":
    main()

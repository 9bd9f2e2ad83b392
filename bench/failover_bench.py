"""Failover time and the price of sync replication, with real processes and a real etcd.

Run by hand: ``uv run python bench/failover_bench.py [--rounds 5] [--lease-ttl 2]``.

1. Failover: a group of two ``spoolmq serve`` brokers (sync replication) in cluster mode;
   each round kill -9s the master and times until the first send the slave answers 201 —
   the lease lapsing, the slave's campaign, its promotion. The killed broker is restarted
   (it rejoins as slave) and caught up before the next round. Median, min and max.
2. Throughput: the same sync pair against a single broker without replication, each driven
   by the same producer threads for the same time; PUT_OK sends per second and their ratio.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise RuntimeError("condition not met in time")
        time.sleep(0.02)


def start_etcd(root: Path) -> tuple[subprocess.Popen[bytes], str]:
    client, peer = free_port(), free_port()
    url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    process = subprocess.Popen(
        [
            ETCD,
            "--name=bench",
            f"--data-dir={root / 'etcd'}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=bench={peer_url}",
            "--log-level=error",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def healthy() -> bool:
        try:
            return bool(httpx.get(url + "/health", timeout=1).json().get("health") == "true")
        except (httpx.HTTPError, ValueError):
            return False

    wait_for(healthy)
    return process, url


class HttpProcess:
    """A server process on 127.0.0.1 started by a bench: its URL, whether it answers
    ``ready_path``, and a stop that lets it shut down cleanly."""

    port: int
    process: subprocess.Popen[bytes] | None
    ready_path = "/readyz"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}{self.ready_path}", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


class Server(HttpProcess):
    """One ``spoolmq serve`` process."""

    def __init__(self, name: str, store: Path, extra: list[str]) -> None:
        self.name, self.store, self.extra = name, store, extra
        self.port, self.ha_port = free_port(), free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Server:
        args = [str(BIN / "spoolmq"), "serve", "--store-dir", str(self.store)]
        args += ["--port", str(self.port), "--broker-name", self.name, "--log-level", "error"]
        self.process = subprocess.Popen(
            args + self.extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(self.ready)
        return self

    def role(self) -> str:
        return str(httpx.get(f"{self.url}/v1/replication", timeout=5).json()["role"])

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def cluster_server(name: str, root: Path, etcd: str, ttl: int) -> Server:
    server = Server(name, root / name, [])
    server.extra = [
        "--cluster=bench",
        f"--etcd={etcd}",
        "--broker-group=g1",
        f"--etcd-lease-ttl-s={ttl}",
        f"--ha-listen=127.0.0.1:{server.ha_port}",
        "--replication=sync",
    ]
    return server


def in_sync(master: Server, slave: Server) -> bool:
    answer = httpx.get(f"{master.url}/v1/topics/Bench/route", timeout=5)
    return answer.status_code == 200 and slave.name in answer.json()["groups"][0]["in_sync"]


def create_topic(server: Server) -> None:
    body = {"read_queue_nums": 4, "write_queue_nums": 4}
    httpx.put(f"{server.url}/v1/topics/Bench", json=body, timeout=10).raise_for_status()


def send_once(url: str) -> int:
    try:
        body = {"body": "failover", "queue_id": 0}
        return httpx.post(f"{url}/v1/topics/Bench/messages", json=body, timeout=5).status_code
    except httpx.HTTPError:
        return 0


def failover_rounds(master: Server, slave: Server, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        wait_for(partial(in_sync, master, slave))
        master.kill()
        killed = time.monotonic()
        while send_once(slave.url) != 201:
            time.sleep(0.01)
        times.append(time.monotonic() - killed)
        master.start()
        master, slave = slave, master
    return times


def throughput(url: str, threads: int, seconds: float) -> float:
    """PUT_OK sends per second from ``threads`` producers of 1 KiB messages."""
    counts = [0] * threads
    stop = time.monotonic() + seconds

    def produce(index: int) -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            while time.monotonic() < stop:
                body = {"body": "x" * 1024, "queue_id": index % 4}
                answer = client.post("/v1/topics/Bench/messages", json=body)
                if answer.status_code == 201 and answer.json()["messages"][0]["status"] == "PUT_OK":
                    counts[index] += 1

    workers = [threading.Thread(target=produce, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sum(counts) / seconds


def spread(values: list[float], digits: int = 2) -> str:
    def show(value: float) -> str:
        return f"{value:.{digits}f}"

    return f"{show(statistics.median(values))} [{show(min(values))}-{show(max(values))}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lease-ttl", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeat", type=int, default=3, help="alternating throughput runs")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spoolmq-failover-"))
    etcd, etcd_url = start_etcd(root)
    servers: list[Server] = []
    sync_rates: list[float] = []
    single_rates: list[float] = []
    try:
        a = cluster_server("a", root, etcd_url, args.lease_ttl)
        b = cluster_server("b", root, etcd_url, args.lease_ttl)
        single = Server("solo", root / "solo", [])
        servers += [a.start(), b.start(), single.start()]
        create_topic(a)
        create_topic(single)
        wait_for(lambda: in_sync(a, b))
        for _ in range(args.repeat):  # the same run, alternating, so both see the same machine
            sync_rates.append(throughput(a.url, args.threads, args.seconds))
            single_rates.append(throughput(single.url, args.threads, args.seconds))
        times = failover_rounds(a, b, args.rounds)
    finally:
        for server in servers:
            server.kill()
        etcd.send_signal(signal.SIGTERM)
        etcd.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    print(f"failover (kill -9 -> first 201), lease TTL {args.lease_ttl} s, {args.rounds} rounds:")
    print(
        f"  median {statistics.median(times):.2f} s, min {min(times):.2f} s, "
        f"max {max(times):.2f} s  ({', '.join(f'{t:.2f}' for t in times)})"
    )
    print(
        f"send throughput, {args.threads} threads x {args.seconds:.0f} s, 1 KiB, PUT_OK only, "
        f"{args.repeat} alternating runs, median [min-max]:"
    )
    print(f"  sync pair   {spread(sync_rates, 0)} msg/s")
    print(f"  single      {spread(single_rates, 0)} msg/s")
    ratios = [s / one for s, one in zip(sync_rates, single_rates, strict=True)]
    print(f"  sync / single  {spread(ratios)}")


if __name__ == "__main__":
    main()

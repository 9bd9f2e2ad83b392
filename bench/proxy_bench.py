"""The proxy's cost per hop: the same requests straight to a broker and through ``spoolmq proxy``,
in the same run.

A real etcd, ``spoolmq serve`` brokers in cluster mode (one broker per group) and a
``spoolmq proxy`` process, all on 127.0.0.1. With ``taskset`` on a machine of 2+ CPUs the
brokers run on CPU 0 and the proxy and the load generator on CPU 1 (``--no-pin``: wherever the
scheduler puts them).

1. One broker group, an 8-queue topic. With ``wrk`` (one thread, ``--latency``) at 1 and 16
   connections, directly against the broker and through the proxy, alternating (sends also
   directly with a new Idempotency-Key each, as the proxy sends them: "direct keyed"):
   single send (1 KiB, no queue named), batch send (100 x 1 KiB, no queue named), pull 32 x 1 KiB
   from random offsets of queue 0. Requests/s (messages/s for batch and pull), latency p50/p99,
   the proxy/direct ratio and the latency the hop adds at p50.
   Targets: single >= 0.5x, batch >= 0.7x, pull >= 0.6x, added p50 <= 0.2 ms at one
   connection, 16 connections never slower than one.
2. Two broker groups, a topic over both, messages only in g1's queues. Group pull (32, no commit)
   and POP receive (32, ``wait_ms`` 0) fanning out through the proxy, against the same request to
   g1's broker directly: a Python client on keep-alive connections, a bounded number of rounds,
   p50/p99 and the added p50 (target <= 0.2 ms at one connection).

3. Proxy workers (``--only workers``): two broker groups, g1's broker pinned to CPU 0 and g2's
   to CPU 1, a topic of 8 queues over both; ``spoolmq proxy --workers 1`` and ``--workers 2``
   in front of them, unpinned, in alternating runs of wrk (2 threads, 32 connections, unpinned):
   single send (1 KiB) and pull 32 x 1 KiB from random offsets of random queues. The aggregate
   rate with 2 workers against 1 (each round's ratio; median [min-max]); target >= 1.6x. On a
   2-CPU machine the proxy's workers, the brokers and wrk share the same two CPUs.

Parts 1 and 2 run their proxies with ``--workers 1`` (one process, pinned). Every part but the
third also runs its requests through ``bench/byte_relay.py`` in front of the first broker
("relay", pinned where the proxy is): bytes copied both ways, nothing parsed — the least one
more process on the path costs on this machine. Sends go through it with a new Idempotency-Key
each, as the proxy sends them, so "after over the relay" is what the proxy's own work adds.
They also run through ``bench/http_relay.py`` ("http", pinned there too): each request and
answer parsed with httptools and given a new head (a send its key), from protocol callbacks
alone, and nothing else done — the least a Python hop that reads HTTP costs, so "after over
the http relay" is what the proxy does beyond reading HTTP: routing, keys, merging answers, and
the layers they run in.

Every run also gives the CPU time per request of the process that answered (the broker
directly, else the proxy; ``/proc/<pid>/stat`` before and after): on a shared machine the
rates and latencies move with everyone else's work, the CPU a request costs much less.

Run by hand (``apt-get install -y wrk``, or ``make bench-tools``)::

    uv run python bench/proxy_bench.py                       # 5 s per wrk run, 2 rounds
    uv run python bench/proxy_bench.py --repeat 3 --duration 5
    uv run python bench/proxy_bench.py --repeat 3 --only workers  # part 3 only
    uv run python bench/proxy_bench.py --before-root DIR     # DIR: git archive REV | tar -x

``--before-root`` runs a second proxy from an earlier checkout (with its own venv when it has one:
``uv sync --frozen`` there) in the same run,
so the "before" column is measured on the same machine state.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
from failover_bench import HttpProcess, Server, free_port, start_etcd, wait_for
from http_bench import Connection, percentile, python_of

BIN = Path(sys.executable).parent
BODY_1K = "x" * 1024
CLUSTER = "bench"
TOPIC = "PB"  # sends
PULLED = "PP"  # pulls: queue 0 filled up front
FANNED = "PF"  # two groups: messages only in g1's queues
FILL = 20_000
T = TypeVar("T")


# ==================================================================== processes


def pin(pid: int, cpu: int | None) -> None:
    """Every thread of ``pid`` onto ``cpu`` (threads started later inherit it)."""
    if cpu is None:
        return
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {cpu})
        except OSError:
            pass  # a thread that just ended


def broker(name: str, group: str, root: Path, etcd: str) -> Server:
    server = Server(name, root / name, [])
    server.extra = [
        f"--cluster={CLUSTER}",
        f"--etcd={etcd}",
        f"--broker-group={group}",
        f"--ha-listen=127.0.0.1:{server.ha_port}",
        "--replication=async",
        "--log-level=warning",
    ]
    return server


@dataclass
class Proxy(HttpProcess):
    """One ``spoolmq proxy`` process, from this checkout or from ``root``."""

    ready_path = "/healthz"

    etcd: str
    root: Path | None = None
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    wrapper: list[str] = field(default_factory=list)
    """A command the proxy runs under (``valgrind --tool=callgrind ...``), or none."""
    workers: int | None = None
    """``--workers``; None: not given (an earlier checkout's proxy may not know the flag)."""

    def start(self) -> Proxy:
        self.launch()
        wait_for(self.ready)
        return self

    def launch(self) -> Proxy:
        """Start the process without waiting for it to answer (several can start at once)."""
        args = ["proxy", "--cluster", CLUSTER, "--etcd", self.etcd, "--port", str(self.port)]
        if self.workers is not None:
            args += ["--workers", str(self.workers)]
        if self.root is None:
            command, cwd = [str(BIN / "spoolmq"), *args], None
        else:
            command, cwd = [python_of(self.root), "-m", "app.cli", *args], self.root
        self.process = subprocess.Popen(
            [*self.wrapper, *command], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return self


@dataclass
class Relay(HttpProcess):
    """One relay process in front of one broker: ``bench/byte_relay.py``, the floor of a hop,
    or ``bench/http_relay.py``, the floor of a hop that reads HTTP."""

    ready_path = "/healthz"  # the broker's, through the relay

    upstream_port: int
    script: str = "byte_relay.py"
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Relay:
        script = Path(__file__).with_name(self.script)
        command = [sys.executable, str(script), "--port", str(self.port)]
        command += ["--upstream", f"127.0.0.1:{self.upstream_port}"]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for(self.ready)
        return self


def pid_of(started: HttpProcess) -> int:
    assert started.process is not None
    return started.process.pid


@dataclass
class Deployment:
    etcd: subprocess.Popen[bytes]
    brokers: list[Server]
    proxies: dict[str, Proxy]  # "after" (this checkout) and, with --before-root, "before"
    relay: Relay | None = None  # in front of the first broker
    http_relay: Relay | None = None  # in front of the first broker

    def stop(self) -> None:
        for relay in (self.relay, self.http_relay):
            if relay is not None:
                relay.stop()
        for proxy in self.proxies.values():
            proxy.stop()
        for server in self.brokers:
            server.stop()
        self.etcd.send_signal(signal.SIGTERM)
        self.etcd.wait(timeout=30)


@contextmanager
def deployment(root: Path, groups: int, args: argparse.Namespace) -> Iterator[Deployment]:
    root.mkdir(parents=True, exist_ok=True)
    etcd, etcd_url = start_etcd(root)
    started = Deployment(etcd, [], {})
    try:
        for index in range(groups):
            name = f"g{index + 1}"
            started.brokers.append(broker(f"{name}-a", name, root, etcd_url).start())
        started.proxies["after"] = Proxy(etcd_url, workers=1).start()
        if args.before_root:
            started.proxies["before"] = Proxy(etcd_url, Path(args.before_root)).start()
        started.relay = Relay(started.brokers[0].port).start()
        started.http_relay = Relay(started.brokers[0].port, "http_relay.py").start()
        cpus = (0, 1) if args.pin and (os.cpu_count() or 1) > 1 else (None, None)
        for server in started.brokers:
            assert server.process is not None
            pin(server.process.pid, cpus[0])
        hops: list[Proxy | Relay] = [
            *started.proxies.values(),
            started.relay,
            started.http_relay,
        ]
        for hop in hops:
            pin(pid_of(hop), cpus[1])
        url = started.proxies["after"].url
        wait_for(lambda: all(httpx.get(f"{url}/healthz").json()["masters"].values()))
        yield started
    finally:
        started.stop()


# ==================================================================== wrk


@dataclass
class Figure:
    """One load run: answers per second, units (messages) per second, latency p50/p99, and
    the CPU time per request of the process that answered (the broker directly, else the
    proxy): what a busy machine bends least."""

    rps: float
    units_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_us: float = math.nan


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


def wrk(
    url: str,
    script: str,
    seconds: int,
    connections: int,
    workdir: Path,
    cpu: int | None,
    threads: int = 1,
) -> tuple[float, dict[str, float], int]:
    """Requests/s, latency percentiles (ms, keys "50" and "99") and requests of one wrk run."""
    path = workdir / "script.lua"
    path.write_text(script.replace(RUN_ID, os.urandom(6).hex()))
    taskset = ["taskset", "-c", str(cpu)] if cpu is not None and shutil.which("taskset") else []
    command = [*taskset, "wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    command += ["--timeout", "10s", "-s", str(path), url]
    result = subprocess.run(
        command, capture_output=True, text=True, check=True, timeout=seconds + 60
    )
    out = result.stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    done = re.search(r"(\d+) requests in", out)
    latency = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.MULTILINE))
    if rps is None or done is None or len(latency) != 2:
        raise RuntimeError(out + result.stderr)
    return float(rps.group(1)), {p: _ms(v) for p, v in latency.items()}, int(done.group(1))


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(\w+)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def post_script(path: str, body: str) -> str:
    return textwrap.dedent(
        f"""
        wrk.method = "POST"
        wrk.path = "{path}"
        wrk.body = {json.dumps(body)}
        wrk.headers["Content-Type"] = "application/json"
        """
    )


def pull_script(path: str, count: int) -> str:
    return textwrap.dedent(
        f"""
        math.randomseed(7)
        local path = "{path}?max_messages=32&offset="
        request = function()
            return wrk.format("GET", path .. math.random(0, {count - 33}))
        end
        """
    )


RUN_ID = "@run@"
"""Where a script names its run: every wrk run gets a new one, so no two runs share a key."""


def keyed_script(path: str, body: str) -> str:
    """A send with a new Idempotency-Key each time, as every send through the proxy has.

    The key's run part is new for every wrk run (:data:`RUN_ID`): a run that counted its keys
    from 1 again under the same name would repeat the keys of the run before it, and the broker
    would answer it with replays (each record read back) instead of storing new sends."""
    return post_script(path, body) + textwrap.dedent(
        f"""
        local n = 0
        local run = "{RUN_ID}"
        request = function()
            n = n + 1
            local headers = {{["Content-Type"] = "application/json"}}
            headers["Idempotency-Key"] = "bench-" .. run .. "-" .. n
            return wrk.format(nil, nil, headers)
        end
        """
    )


SINGLE = json.dumps({"body": BODY_1K})
BATCH = json.dumps({"messages": [{"body": BODY_1K} for _ in range(100)]})
SEND_PATH = f"/v1/topics/{TOPIC}/messages"

# (name, script, units per request, the direct script with keys or None)
WORKLOADS: list[tuple[str, str, int, str | None]] = [
    ("single send 1 KiB", post_script(SEND_PATH, SINGLE), 1, keyed_script(SEND_PATH, SINGLE)),
    ("batch send 100 x 1 KiB", post_script(SEND_PATH, BATCH), 100, keyed_script(SEND_PATH, BATCH)),
    ("pull 32 x 1 KiB", pull_script(f"/v1/topics/{PULLED}/queues/0/messages", FILL), 32, None),
]


def one_group(args: argparse.Namespace, root: Path) -> dict[tuple[str, str, int], list[Figure]]:
    """Each workload at each connection count, against the broker and each proxy in turn."""
    figures: dict[tuple[str, str, int], list[Figure]] = {}
    with deployment(root, 1, args) as running:
        direct = running.brokers[0].url
        via = running.proxies["after"].url
        for topic in (TOPIC, PULLED):
            httpx.put(f"{via}/v1/topics/{topic}", json={"write_queue_nums": 8}).raise_for_status()
        fill(direct, PULLED, FILL, {"queue_id": 0})
        proxied: dict[str, tuple[str, str | None]] = {
            k: (p.url, None) for k, p in running.proxies.items()
        }
        pids = {side: pid_of(p) for side, p in running.proxies.items()}
        pids["direct"] = pids["keyed"] = pid_of(running.brokers[0])
        assert running.relay is not None and running.http_relay is not None
        pids["relay"] = pid_of(running.relay)
        pids["http"] = pid_of(running.http_relay)
        cpu = 1 if args.pin and (os.cpu_count() or 1) > 1 else None
        for name, script, units, keyed in WORKLOADS:
            targets: dict[str, tuple[str, str | None]] = {"direct": (direct, None)}
            if keyed is not None:  # the broker's share of a proxied send: its key
                targets["keyed"] = (direct, keyed)
            # the floor of a hop: the proxy's requests (a send with its key) through the relay
            targets["relay"] = (running.relay.url, keyed)
            # the floor of a hop that reads HTTP (it gives a send its key itself)
            targets["http"] = (running.http_relay.url, None)
            targets |= proxied
            for connections in args.connections:
                for turn in range(args.repeat):
                    for side, (url, other) in in_turn(targets, turn):
                        used = other or script
                        wrk(url, used, 1, connections, root, cpu)  # warm up
                        before = cpu_seconds(pids[side])
                        rps, latency, done = wrk(url, used, args.duration, connections, root, cpu)
                        used_us = (cpu_seconds(pids[side]) - before) * 1e6 / done
                        figure = Figure(rps, rps * units, latency["50"], latency["99"], used_us)
                        figures.setdefault((name, side, connections), []).append(figure)
                        print(f"  {name:<24} c{connections:<3} {side:<7} {show(figure)}")
    return figures


def in_turn(targets: dict[str, T], turn: int) -> list[tuple[str, T]]:
    """The sides of one round in the order they run: direct first (each side's ratio is to the
    direct run of its round) and the two proxies in turns, so neither is always the last to
    find the broker's state (a POP receive hides what it returns: the stock and the handles in
    flight move through the rounds)."""
    items = list(targets.items())
    proxies = [item for item in items if item[0] in ("after", "before")]
    rest = [item for item in items if item[0] not in ("after", "before")]
    return rest + (proxies[::-1] if turn % 2 else proxies)


def fill(url: str, topic: str, count: int, where: dict[str, object]) -> None:
    batch = {"messages": [{"body": BODY_1K} for _ in range(100)], **where}
    with httpx.Client(base_url=url, timeout=30) as client:
        for _ in range(count // 100):
            client.post(f"/v1/topics/{topic}/messages", json=batch).raise_for_status()


def show(figure: Figure) -> str:
    return (
        f"{figure.rps:>9,.0f} req/s {figure.units_per_s:>10,.0f} units/s  "
        f"p50 {figure.p50_ms:.3f} ms  p99 {figure.p99_ms:.3f} ms  cpu {figure.cpu_us:.0f} us/req"
    )


# ==================================================================== fan-out over two groups


async def rounds(
    port: int,
    pid: int,
    method: str,
    path: str,
    body: bytes,
    count: int,
    connections: int,
    diagnose: Callable[[], str] = str,
) -> Figure:
    """``count`` requests over ``connections`` keep-alive connections; latency of each, and
    the CPU time per request of process ``pid`` (the one answering). An answer without
    messages stops the run (the stock is sized for every run), saying what ``diagnose``
    finds."""
    samples: list[float] = []
    left = [count]

    async def worker() -> None:
        connection = await Connection.open(port)
        try:
            for _ in range(20):  # warm up
                await connection.request(method, path, body)
            while left[0] > 0:
                left[0] -= 1
                start = time.perf_counter()
                status, answer = await connection.request(method, path, body)
                samples.append(time.perf_counter() - start)
                if status != 200 or b'"messages":[]' in answer:
                    raise RuntimeError(f"{path}: {status} {answer[:200]!r}; {diagnose()}")
        finally:
            connection.close()

    start, used = time.perf_counter(), cpu_seconds(pid)
    await asyncio.gather(*(worker() for _ in range(connections)))
    rps = len(samples) / (time.perf_counter() - start)
    used_us = (cpu_seconds(pid) - used) * 1e6 / (len(samples) + 20 * connections)
    p50, p99 = statistics.median(samples) * 1000, percentile(samples, 99) * 1000
    return Figure(rps, rps * 32, p50, p99, used_us)


def two_groups(args: argparse.Namespace, root: Path) -> dict[tuple[str, str, int], list[Figure]]:
    figures: dict[tuple[str, str, int], list[Figure]] = {}
    with deployment(root, 2, args) as running:
        via = running.proxies["after"].url
        answer = httpx.put(f"{via}/v1/topics/{FANNED}", json={"write_queue_nums": 8})
        answer.raise_for_status()
        g1 = running.brokers[0]
        assert {q["group"] for q in answer.json()["queues"]} == {"g1", "g2"}
        # Enough for every POP receive of the run to find 32 (a receive hides what it returns).
        per_side = 32 * (args.fanout_rounds + 40 * max(args.connections))
        sides = 3 + len(running.proxies)  # direct, the two relays, each proxy
        stock = per_side * sides * len(args.connections) * args.repeat
        for queue in range(4):
            fill(g1.url, FANNED, stock // 4 + 100, {"queue_id": queue})
        with httpx.Client(timeout=10) as client:
            for url in (g1.url, via):
                client.put(f"{url}/v1/groups/Fan", json={}).raise_for_status()
                client.put(f"{url}/v1/groups/Popper", json={}).raise_for_status()
        assert running.relay is not None and running.http_relay is not None
        targets = {
            "direct": (g1.port, pid_of(g1)),
            "relay": (running.relay.port, pid_of(running.relay)),
            "http": (running.http_relay.port, pid_of(running.http_relay)),
        } | {k: (p.port, pid_of(p)) for k, p in running.proxies.items()}
        pull = ("GET", f"/v1/groups/Fan/topics/{FANNED}/messages?max_messages=32", b"")
        # Hidden for 10 minutes: no receipt expires and comes back (revived) during the run.
        hidden = {"max_messages": 32, "wait_ms": 0, "invisible_ms": 600_000}
        receive = json.dumps(hidden).encode()
        pop = ("POST", f"/v1/groups/Popper/topics/{FANNED}/receive", receive)
        cpu = 1 if args.pin and (os.cpu_count() or 1) > 1 else None
        with on_cpu(cpu):
            for name, (method, path, body) in (("group pull 32", pull), ("POP receive 32", pop)):
                for connections in args.connections:
                    for turn in range(args.repeat):
                        for side, (port, pid) in in_turn(targets, turn):
                            with masters_seen(via, side) as diagnose:
                                figure = asyncio.run(
                                    rounds(
                                        port,
                                        pid,
                                        method,
                                        path,
                                        body,
                                        args.fanout_rounds,
                                        connections,
                                        diagnose,
                                    )
                                )
                            figures.setdefault((name, side, connections), []).append(figure)
                            print(f"  {name:<24} c{connections:<3} {side:<7} {show(figure)}")
    return figures


@contextmanager
def masters_seen(proxy_url: str, side: str) -> Iterator[Callable[[], str]]:
    """Polls the proxy's view of the masters (every 250 ms) while a run lasts: an empty
    fan-out answer while the stock lasts means a group was not heard, and a master missing
    from the view (a lapsed lease) is one way that happens."""
    seen: list[dict[str, str | None]] = []
    done = threading.Event()

    def poll() -> None:
        with httpx.Client(timeout=10) as client:
            while not done.wait(0.25):
                with contextlib.suppress(httpx.HTTPError):
                    masters = client.get(f"{proxy_url}/healthz").json()["masters"]
                    if not seen or seen[-1] != masters:
                        seen.append(masters)

    def diagnose() -> str:
        return f"{side}: the proxy's masters during the run, in turn: {seen}"

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        yield diagnose
    finally:
        done.set()
        poller.join(timeout=15)


@contextmanager
def on_cpu(cpu: int | None) -> Iterator[None]:
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# ==================================================================== proxy workers


SCALED = "PW"  # part 3: 8 queues over both groups
SCALED_FILL = 4_000  # per queue
WORKER_SIDES = ("w1", "w2")
WORKERS_TARGET = 1.6


def random_pull_script(topic: str, queues: int, count: int) -> str:
    """A pull of 32 from a random offset of a random queue of ``topic``."""
    return textwrap.dedent(
        f"""
        math.randomseed(11)
        request = function()
            local queue = math.random(0, {queues - 1})
            local offset = math.random(0, {count - 33})
            local path = "/v1/topics/{topic}/queues/" .. queue .. "/messages"
            return wrk.format("GET", path .. "?max_messages=32&offset=" .. offset)
        end
        """
    )


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and of its children (a proxy's workers) so far."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    total = cpu_seconds(pid)
    for child in children:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            total += cpu_seconds(int(child))
    return total


@contextmanager
def worker_deployment(root: Path, args: argparse.Namespace) -> Iterator[dict[str, Proxy]]:
    """etcd, one broker per group pinned one per CPU, and a proxy of 1 and one of 2 workers."""
    root.mkdir(parents=True, exist_ok=True)
    etcd, etcd_url = start_etcd(root)
    brokers: list[Server] = []
    proxies: dict[str, Proxy] = {}
    try:
        for index in range(2):
            name = f"g{index + 1}"
            brokers.append(broker(f"{name}-a", name, root, etcd_url).start())
            if args.pin and (os.cpu_count() or 1) > 1:
                pin(pid_of(brokers[-1]), index)
        for side in WORKER_SIDES:
            proxies[side] = Proxy(etcd_url, workers=int(side[1:])).launch()
        for proxy in proxies.values():
            wait_for(proxy.ready)
        url = proxies["w1"].url
        wait_for(lambda: len(httpx.get(f"{url}/healthz").json()["masters"]) == 2)
        yield proxies
    finally:
        for proxy in proxies.values():
            proxy.stop()
        for server in brokers:
            server.stop()
        etcd.send_signal(signal.SIGTERM)
        etcd.wait(timeout=30)


def proxy_workers(args: argparse.Namespace, root: Path) -> dict[tuple[str, str, int], list[Figure]]:
    """Single sends and pulls through a proxy of 1 worker and one of 2, in alternating runs."""
    figures: dict[tuple[str, str, int], list[Figure]] = {}
    connections = max(args.connections) * 2
    with worker_deployment(root, args) as proxies:
        via = proxies["w1"].url
        answer = httpx.put(f"{via}/v1/topics/{SCALED}", json={"write_queue_nums": 8})
        answer.raise_for_status()
        assert {q["group"] for q in answer.json()["queues"]} == {"g1", "g2"}
        for queue in range(8):
            fill(via, SCALED, SCALED_FILL, {"queue_id": queue})
        workloads = [
            ("single send 1 KiB", post_script(f"/v1/topics/{SCALED}/messages", SINGLE), 1),
            ("pull 32 x 1 KiB", random_pull_script(SCALED, 8, SCALED_FILL), 32),
        ]
        for name, script, units in workloads:
            for turn in range(args.repeat):
                order = WORKER_SIDES if turn % 2 == 0 else WORKER_SIDES[::-1]
                for side in order:
                    proxy = proxies[side]
                    wrk(proxy.url, script, 1, connections, root, None, threads=2)  # warm up
                    before = tree_cpu_seconds(pid_of(proxy))
                    rps, latency, done = wrk(
                        proxy.url, script, args.duration, connections, root, None, threads=2
                    )
                    used_us = (tree_cpu_seconds(pid_of(proxy)) - before) * 1e6 / done
                    figure = Figure(rps, rps * units, latency["50"], latency["99"], used_us)
                    figures.setdefault((name, side, connections), []).append(figure)
                    print(f"  {name:<24} c{connections:<3} {side:<7} {show(figure)}")
    return figures


def report_workers(figures: dict[tuple[str, str, int], list[Figure]]) -> None:
    """Per workload: each proxy's medians, and 2 workers against 1 (each round's ratio)."""
    for name, side, connections in figures:
        if side != "w2":
            continue
        one, two = figures[(name, "w1", connections)], figures[(name, "w2", connections)]
        ratios = [b.units_per_s / a.units_per_s for a, b in zip(one, two, strict=True)]
        ratio = statistics.median(ratios)
        for label, runs in (("1 worker", one), ("2 workers", two)):
            mid = median_figure(runs)
            print(
                f"{name} c{connections} {label:<9}: {mid.units_per_s:>9,.0f}/s "
                f"p50 {mid.p50_ms:.3f} p99 {mid.p99_ms:.3f} ms, proxy cpu {mid.cpu_us:.0f} us/req"
            )
        print(
            f"  2 workers / 1: {ratio:.2f}x [{min(ratios):.2f}-{max(ratios):.2f}]  "
            f"[>= {WORKERS_TARGET}: {met(ratio >= WORKERS_TARGET)}]"
        )


# ==================================================================== report


TARGETS = {"single send 1 KiB": 0.5, "batch send 100 x 1 KiB": 0.7, "pull 32 x 1 KiB": 0.6}
ADDED_P50_MS = 0.2


def report(figures: dict[tuple[str, str, int], list[Figure]], args: argparse.Namespace) -> None:
    """Per workload: each side's medians over the repeats, and its same-run ratio to direct
    (each run's ratio to the direct run just before it; median [min-max]) with the p50 the hop
    adds — runs alternate, so a pair saw the same machine even when the machine was busy."""
    names = list(dict.fromkeys(name for name, _, _ in figures))
    sides = [
        s
        for s in ("keyed", "relay", "http", "before", "after")
        if any(side == s for _, side, _ in figures)
    ]
    for name in names:
        for connections in args.connections:
            direct_runs = figures[(name, "direct", connections)]
            direct = median_figure(direct_runs)
            print(
                f"{name} c{connections}: direct {direct.units_per_s:,.0f}/s "
                f"p50 {direct.p50_ms:.3f} p99 {direct.p99_ms:.3f} ms, "
                f"broker cpu {direct.cpu_us:.0f} us/req"
            )
            for side in sides:
                runs = figures.get((name, side, connections))
                if not runs:
                    continue
                pairs = list(zip(direct_runs, runs, strict=True))
                ratios = [r.units_per_s / d.units_per_s for d, r in pairs]
                added = statistics.median(r.p50_ms - d.p50_ms for d, r in pairs)
                ratio = statistics.median(ratios)
                mid = median_figure(runs)
                line = (
                    f"  {side:<7} {mid.units_per_s:>9,.0f}/s p50 {mid.p50_ms:.3f} "
                    f"p99 {mid.p99_ms:.3f} ms; ratio {ratio:.2f}x [{min(ratios):.2f}-"
                    f"{max(ratios):.2f}], added p50 {added:.3f} ms, cpu {mid.cpu_us:.0f} us/req"
                )
                verdicts = []
                if side == "after" and name in TARGETS:
                    verdicts.append(f"ratio >= {TARGETS[name]}: {met(ratio >= TARGETS[name])}")
                if side == "after" and connections == 1:
                    verdicts.append(f"added <= {ADDED_P50_MS}: {met(added <= ADDED_P50_MS)}")
                print(line + (f"  [{'; '.join(verdicts)}]" if verdicts else ""))
            after = figures.get((name, "after", connections))
            for floor, label in (("relay", "the relay"), ("http", "the http relay")):
                relayed = figures.get((name, floor, connections))
                if relayed and after:  # what the proxy adds beyond that hop's cost
                    beyond = statistics.median(
                        a.p50_ms - r.p50_ms for r, a in zip(relayed, after, strict=True)
                    )
                    print(f"  after over {label}: p50 {beyond:+.3f} ms")
        for side in ("before", "after"):
            if min(args.connections) == max(args.connections) or name not in TARGETS:
                continue  # the fan-out runs' Python client is their limit at 16
            if (name, side, 1) not in figures:
                continue
            one = median_figure(figures[(name, side, min(args.connections))])
            many = median_figure(figures[(name, side, max(args.connections))])
            print(
                f"  {side}: c{max(args.connections)} / c{min(args.connections)} = "
                f"{many.units_per_s / one.units_per_s:.2f}x "
                f"[never slower: {met(many.units_per_s >= one.units_per_s)}]"
            )


def median_figure(runs: list[Figure]) -> Figure:
    def mid(get: Callable[[Figure], float]) -> float:
        return statistics.median(get(f) for f in runs)

    return Figure(
        mid(lambda f: f.rps),
        mid(lambda f: f.units_per_s),
        mid(lambda f: f.p50_ms),
        mid(lambda f: f.p99_ms),
        mid(lambda f: f.cpu_us),
    )


def met(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--repeat", type=int, default=2, help="alternating runs per figure")
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--fanout-rounds", type=int, default=1000, help="requests per fan-out run")
    parser.add_argument("--no-pin", dest="pin", action="store_false")
    parser.add_argument("--only", choices=("one", "two", "workers"), help="run one part only")
    parser.add_argument("--before-root", help="an earlier checkout whose proxy runs alongside")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is missing: `make bench-tools` or apt-get install -y wrk", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="spoolmq-proxy-bench-"))
    print(
        f"spoolmq proxy bench: {os.cpu_count()} CPUs ({platform.machine()}), "
        f"Python {platform.python_version()}, "
        + (
            "brokers on CPU 0, proxy and client on CPU 1 (workers part: a broker per CPU, "
            "proxies and client unpinned)"
            if args.pin
            else "no pinning"
        )
    )
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    # nearly full, the file system slows writes: a batch's CommitLog write took 310 us, not 45
    free = shutil.disk_usage(root).free / 2**30
    print(f"free space where the stores are: {free:.1f} GiB")
    figures: dict[tuple[str, str, int], list[Figure]] = {}
    scaled: dict[tuple[str, str, int], list[Figure]] = {}
    try:
        if args.only in (None, "one"):
            figures |= one_group(args, root / "one")
        if args.only in (None, "two"):
            figures |= two_groups(args, root / "two")
        if args.only in (None, "workers"):
            scaled = proxy_workers(args, root / "workers")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\nmedians of {args.repeat} alternating runs, {args.duration} s per wrk run")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(figures, args)
    if scaled:
        report_workers(scaled)
    return 0


if __name__ == "__main__":
    sys.exit(main())

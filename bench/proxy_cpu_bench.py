"""The proxy's CPU per request, this checkout's proxy next to an earlier one's, same run.

On a shared machine wrk's rates and latencies move with everyone else's work; the CPU time a
proxy process spends per request moves much less. A real etcd, two ``spoolmq serve`` brokers
(groups g1 and g2) and two ``spoolmq proxy`` processes — this checkout's ("after") and the
one from ``--before-root`` ("before", run with this venv) — against the same brokers. One
keep-alive connection sends blocks of ``--block`` requests to one proxy, then the other,
alternating, ``--repeat`` times; per block the proxy's CPU time (user + system, every thread,
from ``/proc/<pid>/task/*/schedstat``: nanoseconds, no clock ticks) divided by the requests,
and the block's median latency. Medians per side, and after / before.

With ``--callgrind`` both proxies run under ``valgrind --tool=callgrind`` and each block also
gives the proxy's user-space instructions per request (counters zeroed after the warm-up with
``callgrind_control -z`` and dumped after the block): deterministic where the CPU time is not,
but the route table's watch and other periodic work land on whichever block runs then. CPU time
under valgrind means nothing; use smaller blocks (``--block 300``).

Workloads: single send (1 KiB, no queue named), batch send (100 x 1 KiB), pull of 32 x 1 KiB
from queue 0 (random offsets), group pull of 32 (two groups, messages in g1 only, no commit),
POP receive of 32 (two groups, ``wait_ms`` 0).

    uv run python bench/proxy_cpu_bench.py --before-root DIR  # git archive REV | tar -x -C DIR
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from failover_bench import start_etcd, wait_for
from http_bench import Connection
from proxy_bench import BATCH, SINGLE, broker, fill, pid_of, pin
from proxy_bench import Proxy as ProxyProcess

SENT, PULLED, FANNED = "CS", "CP", "CF"
FILL = 5_000


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, in nanoseconds."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError):
            pass  # a thread that just ended
    return total


def knows_workers(root: Path) -> bool:
    """Whether the checkout at ``root`` has ``spoolmq proxy --workers`` (older ones serve in
    one process without it)."""
    return "--workers" in (root / "app" / "cli.py").read_text()


def workloads(args: argparse.Namespace) -> dict[str, tuple[str, object, bytes]]:
    """name -> (method, path or a path maker, body)."""
    rng = random.Random(7)
    pull = f"/v1/topics/{PULLED}/queues/0/messages?max_messages=32&offset="
    hidden = {"max_messages": 32, "wait_ms": 0, "invisible_ms": 600_000}
    chosen = {
        "single send 1 KiB": ("POST", f"/v1/topics/{SENT}/messages", SINGLE.encode()),
        "batch send 100 x 1 KiB": ("POST", f"/v1/topics/{SENT}/messages", BATCH.encode()),
        "pull 32 x 1 KiB": ("GET", lambda: pull + str(rng.randrange(FILL - 33)), b""),
        "group pull 32": ("GET", f"/v1/groups/Fan/topics/{FANNED}/messages?max_messages=32", b""),
        "POP receive 32": (
            "POST",
            f"/v1/groups/Popper/topics/{FANNED}/receive",
            json.dumps(hidden).encode(),
        ),
    }
    return {k: v for k, v in chosen.items() if not args.only or any(o in k for o in args.only)}


def callgrind(pid: int, command: str, dumps: Path | None = None) -> float:
    """``callgrind_control -z`` (zero) or ``-d`` (dump) for ``pid``; after a dump, the
    instructions it counted (from the newest dump file in ``dumps``)."""
    subprocess.run(["callgrind_control", command, str(pid)], check=True, capture_output=True)
    if dumps is None:
        return 0.0
    newest = max(dumps.glob(f"callgrind.{pid}.*"), key=lambda f: f.stat().st_mtime)
    for line in newest.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return float(line.split()[1])
    raise RuntimeError(f"{newest}: no totals")


async def block(
    port: int,
    pid: int,
    method: str,
    path: object,
    body: bytes,
    count: int,
    dumps: Path | None = None,
) -> tuple[float, float, float]:
    """``count`` requests over one connection: the proxy's CPU µs per request, median ms,
    and its instructions per request (``dumps``: it runs under callgrind; else 0)."""
    connection = await Connection.open(port)
    try:
        for _ in range(10):  # warm up
            await connection.request(method, path() if callable(path) else str(path), body)
        samples = []
        if dumps is not None:
            await asyncio.to_thread(callgrind, pid, "-z")
        used = cpu_ns(pid)
        for _ in range(count):
            target = path() if callable(path) else str(path)
            start = time.perf_counter()
            status, answer = await connection.request(method, target, body)
            samples.append(time.perf_counter() - start)
            if status >= 300 or b'"messages":[]' in answer:
                raise RuntimeError(f"{target}: {status} {answer[:300]!r}")
        used = cpu_ns(pid) - used
        counted = await asyncio.to_thread(callgrind, pid, "-d", dumps) if dumps else 0.0
    finally:
        connection.close()
    return used / 1000 / count, statistics.median(samples) * 1000, counted / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before-root", required=True, help="an earlier checkout's root")
    parser.add_argument("--block", type=int, default=1000, help="requests per block")
    parser.add_argument("--repeat", type=int, default=5, help="blocks per side and workload")
    parser.add_argument("--only", nargs="*", help="workloads whose name holds one of these")
    parser.add_argument("--callgrind", action="store_true", help="run the proxies under callgrind")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="spoolmq-proxy-cpu-"))
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    etcd, etcd_url = start_etcd(root)
    brokers = []
    proxies: dict[str, ProxyProcess] = {}
    try:
        for name in ("g1", "g2"):
            brokers.append(broker(f"{name}-a", name, root, etcd_url).start())
        dumps = root / "callgrind" if args.callgrind else None
        wrapper: list[str] = []
        if dumps is not None:
            dumps.mkdir()
            out = f"--callgrind-out-file={dumps}/callgrind.%p"
            wrapper = ["valgrind", "--tool=callgrind", "--dump-instr=no", out]
        for side, code in (("before", Path(args.before_root)), ("after", None)):
            # one process: the CPU and instructions measured are the serving process's
            workers = 1 if code is None or knows_workers(code) else None
            proxies[side] = ProxyProcess(etcd_url, code, wrapper=wrapper, workers=workers).launch()
        for proxy in proxies.values():  # under valgrind a start takes minutes: both at once
            wait_for(proxy.ready, 900)
        if (os.cpu_count() or 1) > 1:
            for server in brokers:
                pin(pid_of(server), 0)
            for proxy in proxies.values():
                pin(pid_of(proxy), 1)
            os.sched_setaffinity(0, {1})
        via = proxies["after"].url
        wait_for(lambda: all(httpx.get(f"{via}/healthz").json()["masters"].values()))
        g1 = brokers[0].url
        for topic in (SENT, PULLED, FANNED):
            answer = httpx.put(f"{via}/v1/topics/{topic}", json={"write_queue_nums": 8})
            answer.raise_for_status()
        fill(g1, PULLED, FILL, {"queue_id": 0})
        receives = args.block + 10
        stock = 32 * receives * args.repeat * 2
        for queue in range(4):
            fill(g1, FANNED, stock // 4 + 200, {"queue_id": queue})
        for url in (g1, via):
            httpx.put(f"{url}/v1/groups/Fan", json={}).raise_for_status()
            httpx.put(f"{url}/v1/groups/Popper", json={}).raise_for_status()
        results: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
        for name, (method, path, body) in workloads(args).items():
            for round_ in range(args.repeat):
                order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
                for side in order:
                    proxy = proxies[side]
                    figure = asyncio.run(
                        block(proxy.port, pid_of(proxy), method, path, body, args.block, dumps)
                    )
                    results.setdefault((name, side), []).append(figure)
                    counted = f"  {figure[2] / 1000:8.1f} k instructions/req" if dumps else ""
                    print(
                        f"  {name:<24} {side:<6} {figure[0]:7.0f} us/req  p50 {figure[1]:.3f} ms"
                        + counted
                    )
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"\nmedians of {args.repeat} blocks of {args.block} requests, one connection")
        print(
            f"{'workload':<24} {'before us':>10} {'after us':>10} {'after/before':>13}"
            "  p50 ms before / after  k instructions before / after"
        )
        for name in workloads(args):
            before, after = results[(name, "before")], results[(name, "after")]
            b_cpu = statistics.median(f[0] for f in before)
            a_cpu = statistics.median(f[0] for f in after)
            b_p50 = statistics.median(f[1] for f in before)
            a_p50 = statistics.median(f[1] for f in after)
            b_ins = statistics.median(f[2] for f in before) / 1000
            a_ins = statistics.median(f[2] for f in after) / 1000
            counted = f"  {b_ins:.1f} / {a_ins:.1f} ({a_ins / b_ins:.3f}x)" if b_ins else ""
            print(
                f"{name:<24} {b_cpu:10.0f} {a_cpu:10.0f} {a_cpu / b_cpu:12.2f}x"
                f"  {b_p50:.3f} / {a_p50:.3f}{counted}"
            )
    finally:
        for proxy in proxies.values():
            proxy.stop()
        for server in brokers:
            server.stop()
        etcd.terminate()
        etcd.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

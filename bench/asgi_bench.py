"""CPU per request of the HTTP app itself, in process: send, batch send and pull through the
whole ASGI app (middleware, routing, handler, services, store), without sockets or a load
generator.

On a shared machine the throughput of ``http_bench.py`` moves by 2x between runs; the CPU
time the serving thread spends per request (``time.thread_time``) moves far less, so this is
the bench for before/after comparisons of the app's own code. Each root (a checkout, e.g.
``git archive REV | tar -x -C DIR``) runs in its own process on a fresh store, the roots
alternating; each figure is the best of ``--rounds`` rounds, the table the median over runs.

    uv run python bench/asgi_bench.py --root DIR --root .   # before, after
    uv run python bench/asgi_bench.py --runs 5 --root DIR --root .
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

BODY_1K = "x" * 1024
ONE = json.dumps({"body": BODY_1K, "tags": "TagA", "keys": ["k1"], "queue_id": 0}).encode()
BATCH = json.dumps({"messages": [{"body": BODY_1K} for _ in range(100)], "queue_id": 0}).encode()


async def _measure(rounds: int, count: int) -> dict[str, float]:
    # imported here: from the root under test (the child process's first path entry)
    from app.main import create_app
    from app.settings import Settings

    store = tempfile.mkdtemp(prefix="spoolmq-asgi-bench-")
    try:
        settings = Settings(store_dir=Path(store), host="127.0.0.1", port=0, log_level="warning")
        app = create_app(settings)

        async def call(method: str, path: str, query: bytes = b"", body: bytes = b"") -> int:
            scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": method,
                "scheme": "http",
                "path": path,
                "raw_path": path.encode(),
                "query_string": query,
                "root_path": "",
                "headers": [
                    (b"host", b"127.0.0.1"),
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
                "client": ("127.0.0.1", 50000),
                "server": ("127.0.0.1", 8080),
                "state": {},
            }
            pending = [{"type": "http.request", "body": body, "more_body": False}]
            status = 0

            async def receive() -> dict[str, Any]:
                if pending:
                    return pending.pop()
                await asyncio.sleep(3600)
                return {"type": "http.disconnect"}

            async def send(message: MutableMapping[str, Any]) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]

            await app(scope, receive, send)
            return status

        async def per_request(request: Callable[[int], Awaitable[int]], n: int) -> float:
            best = float("inf")
            for _ in range(rounds):
                start = time.thread_time()
                for i in range(n):
                    await request(i)
                best = min(best, (time.thread_time() - start) / n)
            return best * 1e6

        async with app.router.lifespan_context(app):
            for _ in range(1200):  # the broker opens the store in the background: /readyz
                if await call("GET", "/readyz") == 200:
                    break
                await asyncio.sleep(0.05)
            for _ in range(50):  # 5,000 messages to pull from
                assert await call("POST", "/v1/topics/P/messages", body=BATCH) == 201
            pulled = await call("GET", "/v1/topics/P/queues/0/messages", b"offset=0")
            assert pulled == 200
            return {
                "send_us": await per_request(
                    lambda i: call("POST", "/v1/topics/B/messages", body=ONE), count
                ),
                "batch_us": await per_request(
                    lambda i: call("POST", "/v1/topics/B/messages", body=BATCH), count // 10
                ),
                "pull_us": await per_request(
                    lambda i: call(
                        "GET",
                        "/v1/topics/P/queues/0/messages",
                        b"offset=%d" % (i * 32 % 4800),
                    ),
                    count,
                ),
            }
    finally:
        shutil.rmtree(store, ignore_errors=True)


def child(root: str, rounds: int, count: int) -> None:
    os.chdir(root)
    sys.path.insert(0, root)
    print(json.dumps(asyncio.run(_measure(rounds, count))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", required=True, help="a checkout to measure")
    parser.add_argument("--runs", type=int, default=3, help="alternations of the roots")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (best)")
    parser.add_argument("--count", type=int, default=2000, help="requests per round")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rounds, args.count)
        return 0
    figures: dict[str, list[dict[str, float]]] = {root: [] for root in args.root}
    for run in range(args.runs):
        for root in args.root:
            command = [sys.executable, str(Path(__file__).resolve()), "--root", root]
            command += ["--child", str(Path(root).resolve()), "--rounds", str(args.rounds)]
            command += ["--count", str(args.count)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            figures[root].append(json.loads(out.strip().splitlines()[-1]))
            print(f"run {run + 1} {root}: {figures[root][-1]}")
    first = args.root[0]
    print(f"CPU us per request (serving thread), median of {args.runs} runs [min - max]")
    for key, label in (
        ("send_us", "single send"),
        ("batch_us", "batch 100"),
        ("pull_us", "pull 32"),
    ):
        line = f"{label:<12}"
        for root in args.root:
            values = [f[key] for f in figures[root]]
            line += (
                f"  {root}: {statistics.median(values):7.1f} [{min(values):.1f}-{max(values):.1f}]"
            )
            if root != first:
                ratios = [
                    f[key] / b[key] for f, b in zip(figures[root], figures[first], strict=True)
                ]
                line += f" ({statistics.median(ratios):.2f}x of {first})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

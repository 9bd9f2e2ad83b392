"""CPU instructions per pull of 32 x 1 KiB messages, in process, counted by valgrind's
callgrind: the pull ``http_bench.py`` makes (``?max_messages=32&offset=N``, N random) through
the whole ASGI app (middleware, routing, handler, services, store).

Instruction counts barely move between runs on a shared machine, unlike wall or CPU time,
so small changes to the pull path show. Each root (a checkout, e.g. ``git archive REV | tar
-x -C DIR``) runs under callgrind on a fresh store with instrumentation off until the pulls
begin and off again after them (``callgrind_control``), so the count is the pulls' alone,
of the thread serving them (the store's background threads wake by the clock, and a slower
run would count more of them). What is left moves by a few percent between runs, and only
upwards (the event loop's timers and the GIL hand-overs to those threads come with time, not
with the pulls): the figure is the least over ``--runs``, the roots alternating.

    uv run python bench/pull_instructions.py --root DIR --root .   # before, after
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

BODY_1K = "x" * 1024
BATCH = json.dumps({"messages": [{"body": BODY_1K} for _ in range(100)], "queue_id": 0}).encode()
MESSAGES = 5_000


async def _pulls(count: int) -> None:
    # imported here: from the root under test (the child process's first path entry)
    from app.main import create_app
    from app.settings import Settings

    store = tempfile.mkdtemp(prefix="spoolmq-pull-bench-")
    try:
        settings = Settings(store_dir=Path(store), host="127.0.0.1", port=0, log_level="warning")
        app = create_app(settings)

        async def call(
            method: str, path: str, query: bytes = b"", body: bytes = b""
        ) -> tuple[int, bytes]:
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
                    (b"content-length", b"%d" % len(body)),
                ],
                "client": ("127.0.0.1", 50000),
                "server": ("127.0.0.1", 8080),
                "state": {},
            }
            pending = [{"type": "http.request", "body": body, "more_body": False}]
            status = 0
            answer = []

            async def receive() -> dict[str, Any]:
                if pending:
                    return pending.pop()
                await asyncio.sleep(3600)
                return {"type": "http.disconnect"}

            async def send(message: MutableMapping[str, Any]) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                else:
                    answer.append(message.get("body", b""))

            await app(scope, receive, send)
            return status, b"".join(answer)

        async with app.router.lifespan_context(app):
            for _ in range(1200):  # the broker opens the store in the background: /readyz
                if (await call("GET", "/readyz"))[0] == 200:
                    break
                await asyncio.sleep(0.05)
            for _ in range(MESSAGES // 100):
                assert (await call("POST", "/v1/topics/P/messages", body=BATCH))[0] == 201
            path = "/v1/topics/P/queues/0/messages"
            for _ in range(1200):  # the ConsumeQueue is dispatched in the background
                _, answer = await call("GET", path, b"offset=0")
                if json.loads(answer).get("max_offset") == MESSAGES:
                    break
                await asyncio.sleep(0.05)
            offsets = random.Random(7)
            _instrument("on")
            for _ in range(count):
                query = b"max_messages=32&offset=%d" % offsets.randint(0, MESSAGES - 33)
                assert (await call("GET", path, query))[0] == 200
            _instrument("off")
    finally:
        shutil.rmtree(store, ignore_errors=True)


def _instrument(state: str) -> None:
    """Callgrind counts only between these (the run starts with instrumentation off)."""
    subprocess.run(
        ["callgrind_control", "-i", state, str(os.getpid())], check=True, capture_output=True
    )


def child(root: str, count: int) -> None:
    os.chdir(root)
    sys.path.insert(0, root)
    asyncio.run(_pulls(count))


def instructions(root: str, pulls: int, workdir: Path) -> int:
    """Instructions callgrind counts over ``pulls`` pulls of ``root``."""
    out = workdir / "callgrind.out"
    command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes"]
    command += [f"--callgrind-out-file={out}"]
    command += [sys.executable, str(Path(__file__).resolve()), "--root", root]
    command += ["--child", str(Path(root).resolve()), "--pulls", str(pulls)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict layouts every run
    subprocess.run(command, capture_output=True, text=True, check=True, env=env)
    serving = out.with_name(f"{out.name}-01")  # the main thread's: the one serving requests
    match = re.search(r"^totals: (\d+)", serving.read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no totals in {out}")
    return int(match.group(1))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", action="append", required=True, help="a checkout to measure")
    parser.add_argument("--runs", type=int, default=1, help="alternations of the roots")
    parser.add_argument("--pulls", type=int, default=200, help="pulls counted per run")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.pulls)
        return 0
    figures: dict[str, list[float]] = {root: [] for root in args.root}
    with tempfile.TemporaryDirectory(prefix="spoolmq-pull-bench-") as workdir:
        for run in range(args.runs):
            for root in args.root:
                counted = instructions(root, args.pulls, Path(workdir))
                figures[root].append(counted / args.pulls)
                print(f"run {run + 1} {root}: {figures[root][-1]:,.0f} instructions per pull")
    first = args.root[0]
    print(f"instructions per pull, least of {args.runs} runs [most]")
    for root in args.root:
        least = min(figures[root])
        line = f"  {root}: {least:,.0f} [{max(figures[root]):,.0f}]"
        if root != first:
            line += f" ({least / min(figures[first]) - 1:+.1%} of {first})"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What message trace costs: batch send and group pull + commit with trace on against off.

Two ``spoolmq serve`` processes on fresh stores, one after the other in each round (the order
alternates between rounds), the server pinned to CPU 0 and ``wrk`` to CPU 1 as in
``http_bench.py``:

- off: the broker's default (no topic traced): the hooks only ask the switch;
- on: ``--trace`` (every topic traced): each stored message gets a ``stored`` event, each
  delivery a ``delivered`` and an ``acked`` when the commit covers it, written to
  ``RMQ_SYS_TRACE_TOPIC`` by the broker's background writer in the same process.

1. Batch send: 100 x 1 KiB messages per request (``http_bench.py``'s batch), messages/s.
2. Pull: ``http_bench.py``'s pull, 32 x 1 KiB messages per request from random offsets of
   one queue, no group: a read, not a delivery, so nothing is traced (messages/s).
3. Group pull + commit: 64 groups in turn pull 32 x 1 KiB messages each from a one-queue topic
   holding 20,000 with ``auto_commit`` (the pull commits what it returns): each message gets
   a ``delivered`` and an ``acked`` (messages/s).

Run by hand (not part of the test suite; needs ``wrk``, which ``make bench-tools`` installs)::

    uv run python bench/trace_bench.py --repeat 3
    uv run python bench/trace_bench.py --duration 10 --repeat 5

Prints each round's figures, then the medians and the on / off ratios (target >= 0.85), and
the trace events the last "on" server wrote and dropped.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import shutil
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx
from http_bench import BATCH, BIN, BODY_1K, free_port, post_script, pull_script, server, wrk

GROUPS = 64
BACKLOG = 20_000


def group_pull_script(topic: str) -> str:
    """Each request: the next group's pull of 32 that commits what it returns."""
    return textwrap.dedent(
        f"""
        local n = 0
        request = function()
            n = n + 1
            local path = "/v1/groups/g" .. (n % {GROUPS}) .. "/topics/{topic}/messages"
            return wrk.format("GET", path .. "?max_messages=32&auto_commit=true")
        end
        """
    )


def fill(url: str, topic: str, count: int) -> None:
    batch = {"messages": [{"body": BODY_1K} for _ in range(100)], "queue_id": 0}
    with httpx.Client(base_url=url, timeout=30) as client:
        config = {"read_queue_nums": 1, "write_queue_nums": 1}
        assert client.put(f"/v1/topics/{topic}", json=config).status_code in (200, 201)
        for _ in range(count // 100):
            assert client.post(f"/v1/topics/{topic}/messages", json=batch).status_code == 201


def trace_counters(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    found = {}
    for name, value in re.findall(r"^(spoolmq_trace_events_\S+) (\S+)$", text, re.MULTILINE):
        found[name] = float(value)
    return found


def measure(args: argparse.Namespace, workdir: Path, traced: bool) -> dict[str, float]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = workdir / "store"
    shutil.rmtree(store, ignore_errors=True)
    command = [str(BIN / "spoolmq"), "serve", "--store-dir", str(store), "--port", str(port)]
    command += ["--log-level", "warning", *(["--trace"] if traced else [])]
    figures: dict[str, float] = {}
    with server(command, url, "/readyz", workdir):
        send_batch = post_script("/v1/topics/B/messages", json.dumps(BATCH))
        wrk(url, send_batch, 1, args.connections, workdir)  # warm up
        rps = wrk(url, send_batch, args.duration, args.connections, workdir)
        figures["batch_msgs_per_s"] = rps * 100
        fill(url, "P", BACKLOG)
        rps = wrk(url, pull_script("P", BACKLOG), args.duration, args.connections, workdir)
        figures["pull_msgs_per_s"] = rps * 32
        rps = wrk(url, group_pull_script("P"), args.duration, args.connections, workdir)
        figures["pull_commit_msgs_per_s"] = rps * 32
        if traced:
            figures.update(trace_counters(url))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per throughput run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is missing: make bench-tools installs it", file=sys.stderr)
        return 2
    runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="trace-bench-") as tmp:
        workdir = Path(tmp)
        for round_number in range(args.repeat):
            order = (False, True) if round_number % 2 == 0 else (True, False)
            for traced in order:
                figures = measure(args, workdir, traced)
                runs[traced].append(figures)
                label = "on " if traced else "off"
                print(
                    f"round {round_number + 1} trace {label}: "
                    f"batch {figures['batch_msgs_per_s']:,.0f} msgs/s, "
                    f"pull {figures['pull_msgs_per_s']:,.0f} msgs/s, "
                    f"pull+commit {figures['pull_commit_msgs_per_s']:,.0f} msgs/s",
                    flush=True,
                )
    print(f"\n{platform.node()}, {args.repeat} rounds of {args.duration} s; medians:")
    for name in ("batch_msgs_per_s", "pull_msgs_per_s", "pull_commit_msgs_per_s"):
        off = statistics.median(r[name] for r in runs[False])
        on = statistics.median(r[name] for r in runs[True])
        ratios = [t[name] / o[name] for t, o in zip(runs[True], runs[False], strict=True)]
        shown = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"{name}: off {off:,.0f}, on {on:,.0f}, on/off {on / off:.2f} (rounds: {shown})")
    last = runs[True][-1]
    counters = {k: v for k, v in last.items() if k.startswith("spoolmq_trace")}
    print("trace events of the last 'on' server:", counters)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Idempotent produce: what an Idempotency-Key costs a send, and a look-up with 10 M keys.

1. HTTP, against one ``spoolmq serve`` pinned to CPU 0 with wrk on CPU 1 (as
   ``bench/http_bench.py``): a batch of 100 x 1 KiB messages with one new key per request
   against the same batch without a key, and a single 1 KiB send with and without a key
   (wrk builds every request on both sides, as a new key per request needs).
   Keyed and unkeyed runs alternate, ``--repeat`` pairs; the figures are the medians of the
   pairs' keyed / unkeyed ratios, of requests/s and of the server's CPU time per request
   (which other load on the machine moves less). Target: a keyed batch costs at most 15 %
   (ratio >= 0.85).
2. Look-up, in-process on a store holding ``--keys`` keyed messages (10 M by default, each
   with its UNIQ_KEY as a send has), all inside the window: the time of
   ``IdempotencyService.find`` for keys never sent (what every new keyed send pays) and for
   random keys that were sent (a retry), next to ``MessageStore.put_message`` of an unkeyed
   1 KiB message in the same store and run. Disk (index files, CommitLog bytes a key adds) and
   the process's resident memory are reported.

Run by hand::

    uv run python bench/idempotency_bench.py                       # both parts
    uv run python bench/idempotency_bench.py --skip-lookup --repeat 5
    uv run python bench/idempotency_bench.py --skip-http --keys 2000000
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from http_bench import BIN, BODY_1K, free_port, post_script, server, wrk

from services.appender import Appender
from services.durability import DurabilityTracker
from services.idempotency import IdempotencyService
from storage import Message, MessageStore, StoreConfig
from storage.record.properties import (
    PROPERTY_IDEMPOTENCY_FINGERPRINT,
    PROPERTY_IDEMPOTENCY_KEY,
    PROPERTY_UNIQ_KEY,
)

BATCH = {"messages": [{"body": BODY_1K} for _ in range(100)], "queue_id": 1}
ONE = {"body": BODY_1K, "queue_id": 0}
FILL_BATCH = 1000


def script(path: str, body: str, keyed: bool) -> str:
    """wrk posting ``body``, building each request (as a new key needs) on both sides, with a
    new Idempotency-Key on every request when ``keyed``."""
    prefix = uuid.uuid4().hex[:12]
    header = f'wrk.headers["Idempotency-Key"] = "{prefix}-" .. counter' if keyed else ""
    return post_script(path, body) + textwrap.dedent(
        f"""
        local counter = 0
        request = function()
          counter = counter + 1
          {header}
          return wrk.format()
        end
        """
    )


def cpu_seconds(process: subprocess.Popen[bytes]) -> float:
    """User + system CPU time the process has used (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure_http(args: argparse.Namespace, workdir: Path) -> dict[str, list[float]]:
    """Per side and run: requests/s, and the server's CPU time per request (less moved by
    other load on the machine than the rate is)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    store = workdir / "http-store"
    command = [str(BIN / "spoolmq"), "serve", "--store-dir", str(store), "--port", str(port)]
    command += ["--log-level", "warning"]
    path = "/v1/topics/B/messages"
    runs: dict[str, list[float]] = {}
    with server(command, url, "/readyz", workdir) as process:
        for body, name in ((json.dumps(BATCH), "batch"), (json.dumps(ONE), "one")):
            wrk(url, script(path, body, True), 1, args.connections, workdir)  # warm up
            for _ in range(args.repeat):
                for keyed in (False, True):
                    side = f"{name}_keyed" if keyed else name
                    cpu = cpu_seconds(process)
                    rate = wrk(
                        url, script(path, body, keyed), args.duration, args.connections, workdir
                    )
                    cpu_us = (cpu_seconds(process) - cpu) / (rate * args.duration) * 1e6
                    runs.setdefault(side, []).append(rate)
                    runs.setdefault(f"{side}_cpu_us", []).append(cpu_us)
                    print(
                        f"  {side}: {rate:,.0f} req/s, {cpu_us:,.0f} us of server CPU per request"
                    )
    shutil.rmtree(store, ignore_errors=True)
    return runs


def fill(store: MessageStore, count: int) -> float:
    """``count`` keyed messages, as keyed sends store them; seconds taken."""
    started = time.perf_counter()
    fingerprint = "0" * 32
    for first in range(0, count, FILL_BATCH):
        queue_id = (first // FILL_BATCH) % 8
        batch = [
            Message(
                "Orders",
                b"order paid",
                queue_id=queue_id,
                properties={
                    PROPERTY_UNIQ_KEY: f"{number:032X}",
                    PROPERTY_IDEMPOTENCY_KEY: f"order-{number:010d}-paid",
                    PROPERTY_IDEMPOTENCY_FINGERPRINT: fingerprint,
                },
            )
            for number in range(first, min(first + FILL_BATCH, count))
        ]
        store.put(batch)
        if first and first % 1_000_000 == 0:
            print(f"  {first:,} keyed messages stored")
    return time.perf_counter() - started


def per_call_us(calls: int, run: Callable[[], object]) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - started) / calls * 1e6


def measure_lookup(args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    root = workdir / "lookup-store"
    config = StoreConfig(commit_log_file_size=512 * 1024 * 1024)
    store = MessageStore.open(root, config)
    try:
        rss_before = _rss_mib()
        seconds = fill(store, args.keys)
        keyed = IdempotencyService(store, Appender(store, DurabilityTracker(store)), 3600)
        since = keyed.since_ms()
        rng = random.Random(7)
        sent = [f"order-{rng.randrange(args.keys):010d}-paid" for _ in range(args.lookups)]
        new = [f"order-{number:010d}-new" for number in range(args.lookups)]
        hits = sum(keyed.find("Orders", key, None, since) is not None for key in sent[:1000])
        assert hits == 1000, f"only {hits} of 1000 sent keys found in the window"
        miss_iter, hit_iter = iter(new), iter(sent)
        miss_us = per_call_us(
            args.lookups, lambda: keyed.find("Orders", next(miss_iter), None, since)
        )
        hit_us = per_call_us(
            args.lookups, lambda: keyed.find("Orders", next(hit_iter), None, since)
        )
        plain = Message("Plain", BODY_1K.encode(), properties={PROPERTY_UNIQ_KEY: "U" * 32})
        put_us = per_call_us(args.lookups, lambda: store.put([plain])[0])
        index_bytes = sum(p.stat().st_size for p in (root / "index").iterdir())
        index_files = len(list((root / "index").iterdir()))
        keyed_record = store.look_message_by_offset(0)
        assert keyed_record is not None
        bare = Message("Orders", b"order paid", properties={PROPERTY_UNIQ_KEY: "U" * 32})
        bare_size = store.put([bare])[0].size
        return {
            "keys": args.keys,
            "fill_s": seconds,
            "miss_us": miss_us,
            "hit_us": hit_us,
            "put_us": put_us,
            "index_mib": index_bytes / 2**20,
            "index_files": index_files,
            "record_extra_bytes": keyed_record.size - bare_size,
            "anon_before_mib": rss_before,
            "anon_after_mib": _rss_mib(),
            "file_after_mib": _rss_mib("RssFile"),
        }
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


def _rss_mib(kind: str = "RssAnon") -> float:
    """Resident memory of this process: ``RssAnon`` (heap and the like) or ``RssFile``
    (mapped file pages: CommitLog and index, shared with the page cache)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{kind}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3, help="alternating runs of each side")
    parser.add_argument("--keys", type=int, default=10_000_000, help="keys in the window")
    parser.add_argument("--lookups", type=int, default=100_000)
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--skip-lookup", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="idempotency-bench-") as tmp:
        workdir = Path(tmp)
        if not args.skip_http:
            print("HTTP sends, keyed vs not (alternating runs):")
            runs = measure_http(args, workdir)
            for name, unit in (("batch", 100), ("one", 1)):
                plain = statistics.median(runs[name]) * unit
                keyed = statistics.median(runs[f"{name}_keyed"]) * unit
                # Each keyed run against the unkeyed run just before it: the machine's load
                # moves both alike, so the pairs' ratios spread less than the rates do.
                pairs = [k / p for k, p in zip(runs[f"{name}_keyed"], runs[name], strict=True)]
                cpu = [
                    p / k
                    for k, p in zip(
                        runs[f"{name}_keyed_cpu_us"], runs[f"{name}_cpu_us"], strict=True
                    )
                ]
                what = "batch 100 x 1 KiB msgs/s" if unit == 100 else "single 1 KiB req/s"
                print(
                    f"{what}: without key {plain:,.0f}, with key {keyed:,.0f} (medians); "
                    f"keyed / unkeyed per pair: median {statistics.median(pairs):.2f}x "
                    f"[{min(pairs):.2f}-{max(pairs):.2f}]; by server CPU per request: "
                    f"median {statistics.median(cpu):.2f}x [{min(cpu):.2f}-{max(cpu):.2f}] "
                    f"({statistics.median(runs[f'{name}_cpu_us']):,.0f} vs "
                    f"{statistics.median(runs[f'{name}_keyed_cpu_us']):,.0f} us)"
                )
        if not args.skip_lookup:
            print(f"Look-up with {args.keys:,} keys in the window:")
            f = measure_lookup(args, workdir)
            print(
                f"filled in {f['fill_s']:.0f} s; index {f['index_mib']:,.0f} MiB in "
                f"{f['index_files']:.0f} files; a key adds {f['record_extra_bytes']:.0f} B "
                f"to its record\n"
                f"look-up of a new key {f['miss_us']:.1f} us, of a sent key {f['hit_us']:.1f} us; "
                f"unkeyed put_message of 1 KiB {f['put_us']:.1f} us "
                f"(new-key look-up = {f['miss_us'] / f['put_us']:.2f}x a put)\n"
                f"anonymous memory {f['anon_before_mib']:,.0f} MiB before the fill, "
                f"{f['anon_after_mib']:,.0f} MiB after; mapped file pages resident "
                f"{f['file_after_mib']:,.0f} MiB (CommitLog and index, page cache)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())

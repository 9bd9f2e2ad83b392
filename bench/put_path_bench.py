"""In-process costs of the put path, lever by lever, for two checkouts in the same run.

Each figure is microseconds per message (per key for the hash), the median of ``--repeat``
measured for every ``--root`` in turn, alternating, so that a machine shared with other
work moves them together:

* ``batch``: ``put_messages`` of 100 x 1 KiB with a UNIQ_KEY and a tag, index on;
* ``single``: ``put_message`` of 1 x 1 KiB with a tag and a key, index on (the allocator's
  worker maps pages in ahead of the write position where the checkout does);
* ``single_no_prefault``: the same with that worker's prefault turned off (where it exists);
* ``key_hash``: the index hash of ``topic#key`` for 200k fresh business keys.

Run by hand::

    git archive REV | tar -x -C /tmp/before
    uv run python bench/put_path_bench.py --root /tmp/before --root .
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# Runs in a child interpreter with the checkout first on sys.path; prints one JSON object.
CHILD = r"""
import json, shutil, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from storage import Message, MessageStore, StoreConfig
from storage.index_file import index_key_hash

kind, count = sys.argv[2], int(sys.argv[3])
body = b"x" * 1024
config = StoreConfig(commit_log_file_size=512 * 1024 * 1024)
directory = Path(tempfile.mkdtemp(prefix="spoolmq-put-path-"))
try:
    if kind == "key_hash":
        keys = [f"order-{i:012d}" for i in range(count)]
        try:
            from storage.index_file import KeyHasher
            hasher = KeyHasher()
            started = time.perf_counter()
            for key in keys:
                hasher("BenchTopic", key)
        except ImportError:
            started = time.perf_counter()
            for key in keys:
                index_key_hash(f"BenchTopic#{key}")
        print(json.dumps((time.perf_counter() - started) / count * 1e6))
        raise SystemExit
    store = MessageStore.open(directory / "store", config)
    if kind == "single_no_prefault":
        store.allocate_service.prefault = lambda *args: None
    if kind == "batch":
        batches = [
            [
                Message("BenchTopic", body, queue_id=b % 8,
                        properties={"TAGS": "TagA", "UNIQ_KEY": f"0A0000010001{b:08X}{i:04X}"})
                for i in range(100)
            ]
            for b in range(count // 100)
        ]
        started = time.perf_counter()
        for batch in batches:
            store.put(batch)
    else:
        messages = [
            Message("BenchTopic", body, queue_id=i % 8,
                    properties={"TAGS": "TagA", "KEYS": f"key-{i:010d}"})
            for i in range(count)
        ]
        started = time.perf_counter()
        for message in messages:
            store.put([message])[0]
    elapsed = time.perf_counter() - started
    store.close()
    print(json.dumps(elapsed / count * 1e6))
finally:
    shutil.rmtree(directory, ignore_errors=True)
"""

KINDS = ("batch", "single", "single_no_prefault", "key_hash")


def measure(root: Path, kind: str, count: int) -> float:
    output = subprocess.run(
        [sys.executable, "-c", CHILD, str(root.resolve()), kind, str(count)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(json.loads(output.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", action="append", type=Path, required=True)
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    best: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.repeat):
        for kind in KINDS:
            for root in args.root:
                value = measure(root, kind, args.count)
                best.setdefault((kind, str(root)), []).append(value)
    print(f"{'measure':20s} " + " ".join(f"{r!s:>28s}" for r in args.root))
    for kind in KINDS:
        cells = []
        for root in args.root:
            values = sorted(best[(kind, str(root))])
            cells.append(f"{values[len(values) // 2]:6.2f} [{values[0]:.2f}-{values[-1]:.2f}]")
        print(f"{kind:20s} " + " ".join(f"{c:>28s}" for c in cells))
    print("us per message (per key for key_hash): median [min-max] of the repeats")
    return 0


if __name__ == "__main__":
    sys.exit(main())

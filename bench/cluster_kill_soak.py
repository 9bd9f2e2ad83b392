"""Cluster kill soak: the two kill-under-load tests, for many more rounds than ``make test``.

Run by hand (Debian's etcd-server: ``make etcd``):
``uv run python bench/cluster_kill_soak.py [--failover-rounds 10] [--exactly-once-rounds 12]``.

- ``tests/app/test_cluster_failover.py``: a master and its sync slave, eight producers, the
  master killed with -9 again and again; every PUT_OK message is on both at the end, once.
- ``tests/app/test_cluster_exactly_once.py``: two groups behind the proxy, keyed and plain
  producers, the masters killed in turn (every third kill while the slave is stopped);
  nothing is stored twice and every keyed send is answered.

``make test`` runs 4 and 6 rounds (every broker killed, also after rejoining as a slave);
this runs the same test functions with the round counts given (and a loop budget that grows
with them), and prints the time each took. A failure is the test's own assertion.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from tests.app import test_cluster_exactly_once, test_cluster_failover


def soak(module: ModuleType, test: Callable[[Path], None], rounds: int) -> float:
    """Run ``test`` with ``rounds`` rounds in a fresh directory; its seconds."""
    setattr(module, "ROUNDS", rounds)  # noqa: B010 - the test reads its module's constants
    setattr(module, "LOOP_BUDGET_S", max(300.0, 30.0 * rounds))  # noqa: B010
    with tempfile.TemporaryDirectory(prefix="spoolmq-kill-soak-") as scratch:
        started = time.monotonic()
        test(Path(scratch))
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--failover-rounds", type=int, default=10)
    parser.add_argument("--exactly-once-rounds", type=int, default=12)
    args = parser.parse_args()
    failover = test_cluster_failover
    seconds = soak(
        failover,
        failover.test_kill_the_master_again_and_again_under_load_loses_no_acked_message,
        args.failover_rounds,
    )
    print(f"failover: {args.failover_rounds} kills, no acked message lost, {seconds:.0f} s")
    once = test_cluster_exactly_once
    seconds = soak(
        once,
        once.test_masters_killed_under_load_store_every_body_at_most_once,
        args.exactly_once_rounds,
    )
    print(f"exactly once: {args.exactly_once_rounds} kills, nothing stored twice, {seconds:.0f} s")


if __name__ == "__main__":
    main()

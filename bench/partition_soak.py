"""Partition soak: the nemeses of ``tests/app/test_cluster_partitions.py``, round after round.

Run as root (network namespaces; Debian's etcd-server and iproute2: ``make etcd iproute2``):
``uv run python bench/partition_soak.py [--rounds 3] [--flaps 10]``.

One deployment per replication mode (etcd, a master and its slave, the proxy, each in a
namespace of its own) takes every round of every nemesis, as the test module's does: each
round heals and settles the group, runs producers through the proxy and straight to each
broker with Idempotency-Keys, applies the nemesis to whichever broker is master then, heals,
drains every queue and checks the test's invariants. Printed per round: PUT_OK acknowledged
sends, lost (must be 0; async: only the cut-off master's last moments in its old epoch),
duplicates, the statuses other than PUT_OK, the isolated master's time to stop acknowledging
PUT_OK and the failover time (both from the cut). A failure is the test's own assertion.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.app import test_cluster_partitions as nemeses
from tests.app.partition_support import Deployment, deployment
from tests.netns import root_skip_reason

Nemesis = Callable[[Deployment], None]


def runs(with_loss: bool) -> dict[str, list[tuple[str, Nemesis]]]:
    """The nemeses by replication mode, in the test module's order."""
    sync: list[tuple[str, Nemesis]] = [
        ("isolated slave", nemeses.test_a_slave_cut_off_loses_nothing_and_catches_up),
        ("isolated etcd", nemeses.test_etcd_cut_off_from_everyone_elects_nobody_and_loses_nothing),
    ]
    if with_loss:
        sync.append(("lossy master link", nemeses.test_a_slow_lossy_master_link_loses_nothing))
    sync += [
        (
            "isolated master",
            nemeses.test_a_sync_master_cut_off_from_etcd_and_its_slave_loses_no_acknowledged_message,
        ),
        (
            "flapping links",
            nemeses.test_the_master_links_flapping_lose_nothing_and_store_nothing_twice,
        ),
    ]
    return {
        "sync": sync,
        "async": [
            (
                "isolated master",
                nemeses.test_an_async_master_cut_off_stops_acknowledging_before_its_successor_starts,
            )
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flaps", type=int, default=10)
    args = parser.parse_args()
    reason = root_skip_reason()
    if reason is not None:
        raise SystemExit(reason)
    setattr(nemeses, "FLAPS", args.flaps)  # noqa: B010 - the test reads its module's constant
    with_loss = nemeses.NETEM or nemeses.BPF_LOSS
    if not with_loss:
        print("lossy master link: not run (the kernel has neither sch_netem nor cls_bpf)")
    elif not nemeses.NETEM:
        print("lossy master link: 5 % loss without delay (no sch_netem; cls_bpf drops)")
    for replication, chosen in runs(with_loss).items():
        with tempfile.TemporaryDirectory(prefix="spoolmq-partition-soak-") as scratch:
            started = time.monotonic()
            with deployment(Path(scratch), replication) as deployed:
                print(f"{replication} deployment up in {time.monotonic() - started:.0f} s")
                for name, nemesis in chosen:
                    for round_no in range(1, args.rounds + 1):
                        began = time.monotonic()
                        nemesis(deployed)  # prints its line
                        seconds = time.monotonic() - began
                        print(
                            f"  {name} ({replication}) round {round_no}: passed in {seconds:.0f} s"
                        )


if __name__ == "__main__":
    main()

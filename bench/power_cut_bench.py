"""Power-cut soak: many power cuts under load on the power-cut file system, then a count of
acknowledged messages the store no longer holds.

Run by hand (root, FUSE: ``make fuse`` installs Debian's fuse3):
``uv run python bench/power_cut_bench.py [--cuts 20] [--flush sync|async] [--acks 400]``.
Each round mounts ``tests.powercut_fs`` over a backing directory, starts ``spoolmq serve``
on it, lets 4 producers run until ``--acks`` more sends are acknowledged, kills the server
with SIGKILL and cuts the power (every byte not fsynced is lost), then mounts again for the
next round on the recovered store. At the end every queue is read and compared with what was
acknowledged. The baseline in the same run is a kill -9 without the cut (``--baseline``
rounds, default 3): with it nothing acknowledged can be lost in either flush mode, so any
loss beyond it is what the disk cache took.

SYNC flush must lose nothing. ASYNC flush may lose what was written since the last flush:
the CommitLog flusher forces the log every 500 ms once 4 pages (16 KiB) are dirty, and fully
every 10 s; the figure printed is the loss per cut next to the sends of one flush interval.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tests.powercut_rounds import Ledger, cut_round, stored_messages


def soak(flush: str, cuts: int, acks: int, cut_power: bool) -> tuple[Ledger, int, float]:
    """(ledger, acknowledged messages missing at the end, seconds)."""
    with tempfile.TemporaryDirectory(prefix="spoolmq-powercut-") as scratch:
        backing, mount_point = Path(scratch) / "backing", Path(scratch) / "mnt"
        ledger = Ledger()
        started = time.monotonic()
        for _ in range(cuts):
            cut_round(backing, mount_point, flush, ledger, 4, acks, cut_power=cut_power)
        stored = stored_messages(backing, mount_point, flush)
        elapsed = time.monotonic() - started
    lost = sum(1 for msg_id, body in ledger.acknowledged.items() if stored.get(msg_id) != body)
    return ledger, lost, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuts", type=int, default=20)
    parser.add_argument("--baseline", type=int, default=3, help="kill -9 rounds, no cut")
    parser.add_argument("--flush", choices=("sync", "async"), default="sync")
    parser.add_argument("--acks", type=int, default=400, help="acknowledged sends per round")
    args = parser.parse_args()

    base, base_lost, base_s = soak(args.flush, args.baseline, args.acks, cut_power=False)
    print(
        f"baseline kill -9 ({args.flush}): {args.baseline} rounds, "
        f"{len(base.acknowledged)} acknowledged, {base_lost} lost, {base_s:.0f} s"
    )
    ledger, lost, elapsed = soak(args.flush, args.cuts, args.acks, cut_power=True)
    rate = len(ledger.acknowledged) / elapsed
    print(
        f"power cuts ({args.flush}): {ledger.cuts} cuts, {len(ledger.acknowledged)} acknowledged,"
        f" {lost} lost ({lost / max(1, ledger.cuts):.1f} a cut), {ledger.restored_pages} "
        f"unsynced pages and lengths put back, {elapsed:.0f} s; {rate:.0f} acks/s over the run, "
        f"≈ {rate / 2:.0f} sends in one 500 ms flush interval"
    )


if __name__ == "__main__":
    main()

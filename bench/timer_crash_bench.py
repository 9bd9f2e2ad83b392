"""Timer crash soak: many kill -9 rounds while timer messages are scheduled, fire and are
cancelled; then a count of what was lost, delivered twice, delivered early or delivered
despite its cancel, and how late the rest were.

Each round (tests/timer_rounds.py, the rounds the test runs ten of) schedules ``--per-round``
messages due at random times in the next 3 s over HTTP, cancels ``--cancels`` not yet due,
waits 0.1 to 0.6 s, kills the server with SIGKILL and starts it again on the same store (forked
by a zygote that imported the server once: tests/serve_zygote.py). Some messages fall due
while it is down: those are measured from the moment it is ready again.

Lateness = the delivered copy's store time minus the earliest it could be delivered (its
time, or the restart after the outage its time fell in). The baseline in the same run is the
same schedule without the kills (``--baseline-rounds``): what the wheel does with no crash.

    uv run python bench/timer_crash_bench.py [--rounds 50] [--per-round 300] [--precision-ms 100]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from tests.serve_process import ForkedServe, Zygote
from tests.timer_rounds import Schedule, crash_rounds, settle


@dataclass
class Soak:
    rounds: int
    scheduled: int
    cancelled: int
    lost: int
    duplicated: int
    early: int
    cancelled_but_delivered: int
    lateness_ms: list[int]
    seconds: float

    def percentile(self, share: float) -> int:
        ordered = sorted(self.lateness_ms)
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0


def soak(rounds: int, per_round: int, cancels: int, precision_ms: int, crash: bool) -> Soak:
    rng = random.Random(25)
    schedule = Schedule()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="spoolmq-timer-soak-") as scratch:
        zygote = Zygote()
        server = ForkedServe(
            zygote, Path(scratch) / "store", "--timer-precision-ms", str(precision_ms)
        )
        try:
            crash_rounds(
                server,
                schedule,
                rng,
                rounds=rounds,
                per_round=per_round,
                cancels=cancels,
                crash=crash,
            )
            with server.client() as client:
                messages = settle(client, schedule, timeout_s=600)
        finally:
            server.kill()
            zygote.close()
    counts = Counter(m["body"] for m in messages)
    expected = schedule.expected
    lateness = [
        m["store_timestamp"] - schedule.earliest(m["body"])
        for m in messages
        if m["body"] in schedule.due
    ]
    return Soak(
        rounds,
        len(schedule.due),
        len(schedule.cancelled),
        len(expected - set(counts)),
        sum(1 for c in counts.values() if c > 1),
        sum(1 for m in messages if m["store_timestamp"] < schedule.due[m["body"]]),
        len(schedule.cancelled & set(counts)),
        lateness,
        time.monotonic() - started,
    )


def report(name: str, result: Soak) -> None:
    print(
        f"{name}: {result.rounds} rounds, {result.scheduled} scheduled, "
        f"{result.cancelled} cancelled, in {result.seconds:.0f} s\n"
        f"  lost {result.lost}, delivered twice {result.duplicated}, early {result.early}, "
        f"delivered despite a cancel {result.cancelled_but_delivered}\n"
        f"  lateness p50 {result.percentile(0.5)} ms, p99 {result.percentile(0.99)} ms, "
        f"max {max(result.lateness_ms, default=0)} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--baseline-rounds", type=int, default=10)
    parser.add_argument("--per-round", type=int, default=300)
    parser.add_argument("--cancels", type=int, default=20)
    parser.add_argument("--precision-ms", type=int, default=100)
    args = parser.parse_args()
    crashed = soak(args.rounds, args.per_round, args.cancels, args.precision_ms, crash=True)
    report("kill -9 every round", crashed)
    calm = soak(args.baseline_rounds, args.per_round, args.cancels, args.precision_ms, crash=False)
    report("baseline, no kill", calm)
    for share in (0.5, 0.99):
        ratio = crashed.percentile(share) / max(1, calm.percentile(share))
        print(f"  lateness p{int(share * 100)}: {ratio:.2f}x the baseline's")


if __name__ == "__main__":
    main()

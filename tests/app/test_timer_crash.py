"""kill -9 while timer messages wait, fire and are cancelled, ten rounds over: after the last
restart every one is delivered exactly once, never before its time (at once if it fell due
while the broker was down), and none whose cancel was answered is ever delivered.

The server is forked by a zygote that imported it once (tests/serve_zygote.py): a round costs
the store's recovery, not the imports. The rounds are tests/timer_rounds.py's, which the soak
bench (bench/timer_crash_bench.py) runs many more of."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

from tests.serve_process import ForkedServe, Zygote
from tests.timer_rounds import Schedule, crash_rounds, settle

ROUNDS = 10
AHEAD = 1000  # scheduled before the first round, due over its first 9 s
PER_ROUND = 150  # scheduled in each round, due in the next 3 s (some while it is down)


def test_kill_9_rounds_lose_no_timer_message_and_deliver_none_twice(tmp_path: Path) -> None:
    with Zygote() as zygote:
        server = ForkedServe(zygote, tmp_path / "store", "--timer-precision-ms", "100")
        try:
            crash_and_check(server)
        finally:
            server.kill()


def crash_and_check(server: ForkedServe) -> None:
    rng = random.Random(25)
    schedule = Schedule()
    start = int(time.time() * 1000) + 1000
    with server.client() as client:
        schedule.send(client, {f"a{n:04d}": start + n * 9 for n in range(AHEAD)})
    crash_rounds(server, schedule, rng, rounds=ROUNDS, per_round=PER_ROUND, cancels=8)
    with server.client() as client:
        messages = settle(client, schedule)
    counts = Counter(m["body"] for m in messages)
    assert set(counts) == schedule.expected, "none lost, no cancelled one delivered"
    assert max(counts.values()) == 1, [n for n, c in counts.items() if c > 1][:5]
    assert schedule.too_late <= set(counts)
    for message in messages:
        assert message["store_timestamp"] >= schedule.due[message["body"]], "never early"
    assert len(schedule.due) == AHEAD + ROUNDS * PER_ROUND
    assert len(schedule.outages) == ROUNDS

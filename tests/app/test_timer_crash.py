"""kill -9 while timer messages wait and fire: after each restart every one is delivered
exactly once, never before its time (at once if it fell due while the broker was down)."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from tests.app.test_idempotency_crash import Spool
from tests.conftest import wait_until

COUNT = 600
ROUNDS = 3


def delivered(client: httpx.Client, topic: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for queue_id in range(8):
        offset = 0
        while True:
            answer = client.get(
                f"/v1/topics/{topic}/queues/{queue_id}/messages",
                params={"offset": offset, "max_messages": 1000},
            )
            messages = answer.json().get("messages", []) if answer.status_code == 200 else []
            if not messages:
                break
            found.extend(messages)
            offset = messages[-1]["queue_offset"] + 1
    return found


def test_kill_9_rounds_lose_no_timer_message_and_deliver_none_twice(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "store", "--timer-precision-ms", "100")
    rng = random.Random(25)
    try:
        start = int(time.time() * 1000) + 1500
        due = {f"m{n:04d}": start + n * 8 for n in range(COUNT)}  # over about 5 s
        with spool.client() as client:
            names = list(due)
            for first in range(0, COUNT, 100):
                batch = [{"body": n, "deliver_at": due[n]} for n in names[first : first + 100]]
                answer = client.post("/v1/topics/Crash/messages", json={"messages": batch})
                assert answer.status_code == 201, answer.text
        for _ in range(ROUNDS):
            time.sleep(rng.uniform(0.3, 1.2))
            spool.kill()
            spool.restart()
        with spool.client() as client:
            wait_until(lambda: len(delivered(client, "Crash")) >= COUNT, timeout=60)
            last_due = max(due.values())
            wait_until(lambda: client.get("/v1/timers").json()["read_time_ms"] > last_due + 200)
            messages = delivered(client, "Crash")
        counts = Counter(m["body"] for m in messages)
        assert set(counts) == set(due), "none lost"
        assert max(counts.values()) == 1, [n for n, c in counts.items() if c > 1][:5]
        for message in messages:
            assert message["store_timestamp"] >= due[message["body"]], "never early"
    finally:
        spool.kill()

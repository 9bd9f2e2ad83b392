"""Timer crash rounds, shared by the test (ten rounds) and the soak bench (many more): timer
messages are scheduled and some cancelled over HTTP, the server is killed with SIGKILL and
started again, round after round; then what was delivered is read back."""

from __future__ import annotations

import random
import time
from typing import Any, Protocol

import httpx

TOPIC = "Crash"


class Restartable(Protocol):
    """A server a round kills and starts again (tests/serve_process.py)."""

    def kill(self) -> None: ...

    def restart(self) -> None: ...

    def client(self, timeout: float = 30) -> httpx.Client: ...


def now_ms() -> int:
    return int(time.time() * 1000)


def delivered(client: httpx.Client, topic: str = TOPIC) -> list[dict[str, Any]]:
    """Every message of the topic's queues (up to 8), pull after pull."""
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


class Schedule:
    """What was scheduled (due time and handle by body) and what cancels answered."""

    def __init__(self, topic: str = TOPIC) -> None:
        self.topic = topic
        self.due: dict[str, int] = {}
        self.handles: dict[str, str] = {}
        self.cancelled: set[str] = set()  # answered 200: never to be delivered
        self.too_late: set[str] = set()  # answered 409: delivered
        self.outages: list[tuple[int, int]] = []  # (killed at, ready again at), ms

    def send(self, client: httpx.Client, due: dict[str, int]) -> None:
        """Schedule each body for its due time, fifty to a batch."""
        names = list(due)
        for first in range(0, len(names), 50):
            chunk = names[first : first + 50]
            batch = [{"body": n, "deliver_at": due[n]} for n in chunk]
            answer = client.post(f"/v1/topics/{self.topic}/messages", json={"messages": batch})
            assert answer.status_code == 201, answer.text
            for name, receipt in zip(chunk, answer.json()["messages"], strict=True):
                self.handles[name] = receipt["timer_handle"]
        self.due |= due

    def cancel_some(self, client: httpx.Client, rng: random.Random, count: int) -> None:
        """Cancel ``count`` messages not yet due; remember what each answer said."""
        now = now_ms()
        pending = sorted(n for n, at in self.due.items() if at > now and n not in self.cancelled)
        for name in rng.sample(pending, min(count, len(pending))):
            answer = client.delete(f"/v1/topics/{self.topic}/timers/{self.handles[name]}")
            if answer.status_code == 200:
                self.cancelled.add(name)
            else:
                assert answer.status_code == 409, answer.text
                self.too_late.add(name)

    @property
    def expected(self) -> set[str]:
        return set(self.due) - self.cancelled

    def earliest(self, name: str) -> int:
        """When a message could be delivered: its time, or the restart after an outage that
        its time fell in."""
        due = self.due[name]
        for down, up in self.outages:
            if down <= due < up:
                return up
        return due


def crash_rounds(
    server: Restartable,
    schedule: Schedule,
    rng: random.Random,
    *,
    rounds: int,
    per_round: int,
    cancels: int,
    crash: bool = True,
) -> None:
    """Each round: schedule ``per_round`` due within 3 s, cancel ``cancels``, wait a moment,
    then kill -9 and restart (``crash=False``: the same without the kill, a baseline)."""
    for number in range(rounds):
        now = now_ms()
        spread = {f"r{number}-{n:04d}": now + rng.randrange(3000) for n in range(per_round)}
        with server.client() as client:
            schedule.send(client, spread)
            schedule.cancel_some(client, rng, cancels)
        time.sleep(rng.uniform(0.1, 0.6))
        if crash:
            down = now_ms()
            server.kill()
            server.restart()
            schedule.outages.append((down, now_ms()))


def settle(client: httpx.Client, schedule: Schedule, timeout_s: float = 60) -> list[dict[str, Any]]:
    """Wait until every expected message is delivered and the wheel has passed the last due
    time; what the topic holds then."""
    deadline = time.monotonic() + timeout_s
    last_due = max(schedule.due.values())
    while time.monotonic() < deadline:
        messages = delivered(client, schedule.topic)
        read_time = client.get("/v1/timers").json()["read_time_ms"]
        if len(messages) >= len(schedule.expected) and read_time > last_due + 200:
            return messages
        time.sleep(0.1)
    raise AssertionError("the timer messages were not all delivered in time")

"""kill -9 of a SYNC-flush server while workers receive and ack, over and over: no answered ack
is undone (an acked message is never delivered again), nothing is lost, and what was in flight
comes back after its invisibility."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.pop.checkpoint import REVIVE_TOPIC, AckRecord, decode_record
from storage.store_reader import iter_store_records
from tests.serve_process import ForkedServe, ServeProcess, Zygote

ROUNDS = 20
MESSAGES = 1200
TOPIC, GROUP = "Crash", "crash-workers"


SERVER_ARGS = (
    "--flush",
    "sync",
    "--message-delay-levels",
    " ".join(["1s"] * 18),
    "--offset-persist-interval-s",
    "0.2",
)
SERVER_ENV = {"SPOOLMQ_COMMIT_LOG_FILE_SIZE": str(4 * 1024 * 1024)}


class Server(ServeProcess):
    """A ``spoolmq serve`` process with SYNC flush on a fixed store."""

    def __init__(self, store: Path) -> None:
        super().__init__(store, *SERVER_ARGS, env=SERVER_ENV)


class ForkedServer(ForkedServe):
    """The same server forked by a zygote: twenty restarts cost twenty store recoveries."""

    def __init__(self, zygote: Zygote, store: Path) -> None:
        super().__init__(zygote, store, *SERVER_ARGS, env=SERVER_ENV)


class Ledger:
    """What the workers saw: every answered ack, and any delivery after one."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: set[str] = set()
        # Acks sent whose answer never came (the server died first): each may or may not
        # have been written, so such a message may rightly never come back. By body: the
        # (queue topic, queue id, queue offset) of each such delivery.
        self.in_doubt: dict[str, list[tuple[str, int, int]]] = {}
        self.redelivered_after_ack: list[str] = []

    def delivered(self, messages: list[dict[str, Any]]) -> None:
        with self.lock:
            self.redelivered_after_ack += [m["body"] for m in messages if m["body"] in self.acked]

    def answered(self, messages: list[dict[str, Any]], outcomes: list[str]) -> None:
        with self.lock:
            self.acked.update(
                m["body"] for m, o in zip(messages, outcomes, strict=True) if o == "acked"
            )

    def unanswered(self, messages: list[dict[str, Any]]) -> None:
        with self.lock:
            for m in messages:
                where = (m.get("queue_topic", m["topic"]), m["queue_id"], m["queue_offset"])
                self.in_doubt.setdefault(m["body"], []).append(where)


def work(url: str, ledger: Ledger, stop: threading.Event, seed: int, ack_share: float) -> None:
    """Receive and ack (most of) what comes, until stopped or the server dies."""
    rng = random.Random(seed)
    try:
        with httpx.Client(base_url=url, timeout=10) as client:
            while not stop.is_set():
                response = client.post(
                    f"/v1/groups/{GROUP}/topics/{TOPIC}/receive",
                    json={"max_messages": 16, "wait_ms": 200, "invisible_ms": 1000},
                )
                if response.status_code != 200:
                    continue
                got = response.json()["messages"]
                ledger.delivered(got)
                chosen = [m for m in got if rng.random() < ack_share]
                if not chosen:
                    continue
                try:
                    response = client.post(
                        f"/v1/groups/{GROUP}/acks",
                        json={"receipt_handles": [m["receipt_handle"] for m in chosen]},
                    )
                except httpx.TransportError:
                    ledger.unanswered(chosen)
                    raise
                if response.status_code == 200:
                    ledger.answered(chosen, [r["outcome"] for r in response.json()["results"]])
    except httpx.TransportError:
        return  # the server was killed


def acks_in_revive_log(store: Path) -> set[tuple[str, int, int]]:
    """(queue topic, queue id, queue offset) of every delivery the revive log records as
    acked by a worker, read from the store's files (the server is down)."""
    acked: set[tuple[str, int, int]] = set()
    for record in iter_store_records(store):
        if record.message.topic != REVIVE_TOPIC:
            continue
        ack = decode_record(record.message)
        if isinstance(ack, AckRecord) and ack.reason == "ack" and ack.group == GROUP:
            acked.update((ack.topic, ack.queue_id, offset) for offset in ack.offsets)
    return acked


def run_workers(url: str, ledger: Ledger, seconds: float, ack_share: float, seed: int) -> None:
    stop = threading.Event()
    threads = [
        threading.Thread(target=work, args=(url, ledger, stop, seed * 10 + n, ack_share))
        for n in range(3)
    ]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)


@pytest.mark.slow
def test_kill_9_mid_run_undoes_no_answered_ack_and_loses_nothing(tmp_path: Path) -> None:
    with Zygote() as zygote:
        crash_rounds(tmp_path / "data", partial(ForkedServer, zygote))


def crash_rounds(store: Path, serve: Callable[[Path], ForkedServer]) -> None:
    bodies = {f"m{i}" for i in range(MESSAGES)}
    server = serve(store)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            assert client.put(f"/v1/topics/{TOPIC}", json={}).status_code in (200, 201)
            ordered = sorted(bodies)
            for start in range(0, MESSAGES, 100):
                batch = [{"body": b} for b in ordered[start : start + 100]]
                sent = client.post(f"/v1/topics/{TOPIC}/messages", json={"messages": batch})
                assert sent.status_code == 201, sent.text
    finally:
        server.kill()
    ledger = Ledger()
    rng = random.Random(12)
    for round_no in range(ROUNDS):
        server = serve(store)
        stop = threading.Event()
        threads = [
            threading.Thread(target=work, args=(server.url, ledger, stop, round_no * 10 + n, 0.8))
            for n in range(3)
        ]
        for thread in threads:
            thread.start()
        time.sleep(rng.uniform(0.2, 0.8))
        server.kill()  # mid-run: receives and acks are in progress
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        assert not ledger.redelivered_after_ack, ledger.redelivered_after_ack[:5]
    assert ledger.acked, "the workers acked something between the crashes"
    server = serve(store)
    try:
        deadline = time.monotonic() + 120
        while bodies - ledger.acked - set(ledger.in_doubt) and time.monotonic() < deadline:
            run_workers(server.url, ledger, 1.5, 1.0, seed=99)
        # Whatever else was in flight comes back: one more pass past the longest invisibility.
        run_workers(server.url, ledger, 2.5, 1.0, seed=98)
        assert not ledger.redelivered_after_ack, ledger.redelivered_after_ack[:5]
    finally:
        server.kill()
    # Only a message whose ack was sent and never answered may stay away, and only because
    # that ack was written just before the kill: the revive log must hold it.
    missing = bodies - ledger.acked
    assert missing <= set(ledger.in_doubt), f"{len(missing - set(ledger.in_doubt))} messages lost"
    written = acks_in_revive_log(store)
    assert len(written) >= len(ledger.acked), "every answered ack is in the revive log"
    for body in missing:
        assert any(where in written for where in ledger.in_doubt[body]), f"{body} was lost"

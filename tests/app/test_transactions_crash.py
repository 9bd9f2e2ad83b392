"""kill -9 of a SYNC-flush server while producers send half messages and end them, over and
over: after each restart nothing committed is lost, nothing rolled back appears, nothing
appears twice, and an end repeated after the crash answers what the first one did."""

from __future__ import annotations

import random
import threading
import time
from functools import partial
from pathlib import Path

import httpx

from tests.app.test_pop_crash import Server
from tests.conftest import wait_until
from tests.timer_rounds import delivered

ROUNDS = 10
WORKERS = 3
ENDS_A_ROUND = 5  # the kill waits for this many answered ends, so that every round has some
TOPIC, GROUP = "TxCrash", "tx-crash"


class Ledger:
    """What the producers were told, and what they meant to do when the server died."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answered: dict[str, str] = {}  # transaction id -> "commit" / "rollback"
        self.unanswered: dict[str, str] = {}  # the end was sent, no answer came

    def answered_at_least(self, count: int) -> bool:
        return len(self.answered) >= count

    def produce(self, url: str, rng: random.Random, stop: threading.Event) -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            while not stop.is_set():
                try:
                    sent = client.post(
                        f"/v1/topics/{TOPIC}/transactions",
                        json={"producer_group": GROUP, "message": {"body": "x"}},
                    )
                except httpx.TransportError:
                    return  # a half without an answer was never promised
                assert sent.status_code == 201, sent.text
                transaction_id = sent.json()["transaction_id"]
                how = "rollback" if rng.random() < 0.3 else "commit"
                with self.lock:
                    self.unanswered[transaction_id] = how
                try:
                    ended = end(client, transaction_id, how)
                except httpx.TransportError:
                    return
                assert ended.status_code == 200, ended.text
                with self.lock:
                    del self.unanswered[transaction_id]
                    self.answered[transaction_id] = how


def end(client: httpx.Client, transaction_id: str, how: str) -> httpx.Response:
    return client.post(f"/v1/transactions/{transaction_id}/{how}", json={"producer_group": GROUP})


def committed_ids(client: httpx.Client) -> list[str]:
    """The transaction id of every message visible in the topic (duplicates kept)."""
    return [m["properties"]["__transactionId__"] for m in delivered(client, TOPIC)]


def test_kill_9_in_every_phase_loses_nothing_committed_and_shows_nothing_rolled_back(
    tmp_path: Path,
) -> None:
    rng = random.Random(26)
    ledger = Ledger()
    for round_number in range(ROUNDS + 1):
        server = Server(tmp_path / "store")
        try:
            with httpx.Client(base_url=server.url, timeout=10) as client:
                # Ends the crash cut off: the producer retries them on the restarted server.
                for transaction_id, how in list(ledger.unanswered.items()):
                    assert end(client, transaction_id, how).status_code == 200
                    ledger.answered[transaction_id] = how
                ledger.unanswered.clear()
                check(client, ledger, rng)
            if round_number == ROUNDS:
                break
            stop = threading.Event()
            workers = [
                threading.Thread(
                    target=ledger.produce, args=(server.url, random.Random(rng.random()), stop)
                )
                for _ in range(WORKERS)
            ]
            answered_before = len(ledger.answered)
            for worker in workers:
                worker.start()
            wait_until(partial(ledger.answered_at_least, answered_before + ENDS_A_ROUND), 120)
            time.sleep(rng.uniform(0.0, 0.4))
        finally:
            server.kill()
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    assert len(ledger.answered) >= ROUNDS * ENDS_A_ROUND


def check(client: httpx.Client, ledger: Ledger, rng: random.Random) -> None:
    ids = committed_ids(client)
    assert len(ids) == len(set(ids)), "a committed message appears twice"
    expected = {t for t, how in ledger.answered.items() if how == "commit"}
    assert set(ids) == expected
    for transaction_id in rng.sample(sorted(ledger.answered), min(5, len(ledger.answered))):
        how = ledger.answered[transaction_id]
        again = end(client, transaction_id, how)
        assert again.status_code == 200 and again.json()["repeated"] is True
        other = "rollback" if how == "commit" else "commit"
        assert end(client, transaction_id, other).status_code == 409

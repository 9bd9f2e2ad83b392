"""Repeated kill -9 of the master under load, with sync replication: every message a producer
was told PUT_OK survives on whoever is master at the end, exactly once."""

from __future__ import annotations

import threading
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from tests.app.cluster_support import ClusterBroker
from tests.conftest import wait_until
from tests.etcd_support import start_etcd

PRODUCERS = 8
ROUNDS = 4
"""Each broker is killed twice as master, once after it came back as a slave that cut its
unconfirmed tail. ``bench/cluster_kill_soak.py`` runs the same loop for many more rounds."""
LOOP_BUDGET_S = 300.0  # a bound on a stuck loop; 4 rounds take 25-40 s on 2 cores


class Producers:
    """Threads that send to whoever they believe is master and keep the PUT_OK msg ids."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.master = urls[0]
        self.acked: list[str] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(PRODUCERS)
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def acked_count(self) -> int:
        with self.lock:
            return len(self.acked)

    def acked_more_than(self, count: int) -> bool:
        return self.acked_count() > count

    def _other(self, url: str) -> str:
        return self.urls[1] if url == self.urls[0] else self.urls[0]

    def _run(self, index: int) -> None:
        sent = 0
        with httpx.Client(timeout=10) as client:
            while not self.stopping.is_set():
                url = self.master
                sent += 1
                body = {"body": f"p{index}-{sent}", "queue_id": sent % 2}
                try:
                    answer = client.post(f"{url}/v1/topics/Kill/messages", json=body)
                except httpx.HTTPError:
                    self.master = self._other(url)
                    time.sleep(0.05)
                    continue
                self._record(url, answer)

    def _record(self, url: str, answer: httpx.Response) -> None:
        if answer.status_code == 201:
            ok = [m["msg_id"] for m in answer.json()["messages"] if m["status"] == "PUT_OK"]
            with self.lock:
                self.acked.extend(ok)
        elif answer.status_code == 421:
            self.master = answer.json()["master"] or self._other(url)
        else:  # 503 NO_MASTER during a failover, or a master that lost its key
            time.sleep(0.05)


def in_sync(master: ClusterBroker, slave: ClusterBroker) -> bool:
    answer = httpx.get(f"{master.url}/v1/topics/Kill/route", timeout=10)
    return answer.status_code == 200 and slave.name in answer.json()["groups"][0]["in_sync"]


def is_master(broker: ClusterBroker) -> bool:
    return broker.role() == "master"


def holds_all(broker: ClusterBroker, ids: set[str]) -> bool:
    return ids <= set(pull_ids(broker.url, 0) + pull_ids(broker.url, 1))


def pull_ids(url: str, queue_id: int) -> list[str]:
    ids: list[str] = []
    offset = 0
    with httpx.Client(base_url=url, timeout=10) as client:
        while True:
            answer: dict[str, Any] = client.get(
                f"/v1/topics/Kill/queues/{queue_id}/messages",
                params={"offset": offset, "max_messages": 1024},
            ).json()
            if not answer["messages"]:
                return ids
            ids += [m["msg_id"] for m in answer["messages"]]
            offset = answer["next_offset"]


def test_kill_the_master_again_and_again_under_load_loses_no_acked_message(
    tmp_path: Path,
) -> None:
    etcd = start_etcd(tmp_path)
    a = ClusterBroker("a", tmp_path / "a", etcd.url)
    b = ClusterBroker("b", tmp_path / "b", etcd.url)
    producers = Producers([a.url, b.url])
    try:
        a.start()
        b.start()
        topic = {"read_queue_nums": 2, "write_queue_nums": 2}
        assert httpx.put(f"{a.url}/v1/topics/Kill", json=topic, timeout=10).status_code in (
            200,
            201,
        )
        producers.start()
        master, slave = a, b
        rounds = 0
        deadline = time.monotonic() + LOOP_BUDGET_S
        while rounds < ROUNDS and time.monotonic() < deadline:
            wait_until(partial(in_sync, master, slave), timeout=30)
            before = producers.acked_count()
            wait_until(partial(producers.acked_more_than, before), timeout=30)
            master.kill()
            wait_until(partial(is_master, slave), timeout=30)
            master.start()  # restarted: truncates an unconfirmed tail and rejoins as slave
            assert master.role() == "slave"
            master, slave = slave, master
            rounds += 1
        assert rounds == ROUNDS
        wait_until(lambda: in_sync(master, slave), timeout=30)
        producers.stop()
        acked = set(producers.acked)
        assert len(acked) == len(producers.acked)
        for broker in (master, slave):  # the slave, caught up, holds the same queues
            wait_until(partial(holds_all, broker, acked))
            stored = pull_ids(broker.url, 0) + pull_ids(broker.url, 1)
            assert len(stored) == len(set(stored)), "a message appears twice in a ConsumeQueue"
        assert len(acked) > ROUNDS
    finally:
        producers.stop()
        b.stop()
        a.stop()
        etcd.stop()

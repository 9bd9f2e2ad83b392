"""Sends through the proxy are stored at most once, whatever happens to the brokers: a slave
stalled under a sync send, and masters killed again and again under producers with and
without Idempotency-Keys. Real etcd, real ``spoolmq serve`` processes, the proxy on uvicorn."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from app.proxy.context import ProxyLimits
from tests.app.cluster_support import ClusterBroker
from tests.app.proxy.support import ProxyServer, start_proxy
from tests.conftest import wait_until
from tests.etcd_support import EtcdServer, start_etcd

TOPIC = "Once"


@contextmanager
def deployment(
    tmp_path: Path, brokers: list[ClusterBroker], etcd: EtcdServer, limits: ProxyLimits
) -> Iterator[ProxyServer]:
    """Start ``brokers`` (masters first) and a proxy; stop all of it, stalled or not."""
    proxy: ProxyServer | None = None
    try:
        for broker in brokers:
            broker.start()
        proxy = start_proxy(etcd.url, cluster="test", limits=limits)
        yield proxy
    finally:
        if proxy is not None:
            proxy.stop()
        for broker in reversed(brokers):
            if broker.process is not None and broker.process.poll() is None:
                os.kill(broker.process.pid, signal.SIGCONT)
            broker.stop()
        etcd.stop()


def masters(proxy: ProxyServer) -> dict[str, str | None]:
    return dict(httpx.get(f"{proxy.url}/healthz", timeout=10).json()["masters"])


def in_sync(master: ClusterBroker, slave: ClusterBroker) -> bool:
    try:
        answer = httpx.get(f"{master.url}/v1/topics/{TOPIC}/route", timeout=10)
    except httpx.HTTPError:
        return False
    groups = {g["group"]: g for g in answer.json()["groups"]} if answer.is_success else {}
    return slave.name in groups.get(master.group, {}).get("in_sync", ())


def is_master(broker: ClusterBroker) -> bool:
    return broker.role() == "master"


def stored_bodies(proxy: ProxyServer, queues: int) -> Counter[str]:
    """Every body in every queue of the topic, as often as it is stored."""
    bodies: Counter[str] = Counter()
    with httpx.Client(base_url=proxy.url, timeout=30) as client:
        for queue_id in range(queues):
            offset = 0
            while True:
                answer = client.get(
                    f"/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                    params={"offset": offset, "max_messages": 1024},
                )
                assert answer.status_code == 200, answer.text
                page: dict[str, Any] = answer.json()
                if not page["messages"]:
                    break
                bodies.update(m["body"] for m in page["messages"])
                offset = page["next_offset"]
    return bodies


def test_a_send_stuck_behind_a_stalled_slave_is_stored_once_and_not_moved(
    tmp_path: Path,
) -> None:
    """Without a queue, a send that reached a master waiting for its stopped slave must not
    be sent to the other group when its attempt times out (each body used to be stored in two
    queues): it is tried again there with its key, then answered 504 OUTCOME_UNKNOWN."""
    etcd = start_etcd(tmp_path)
    long_wait = ["--sync-flush-timeout-ms", "60000"]
    g1_a = ClusterBroker("g1-a", tmp_path / "g1a", etcd.url, group="g1", extra=long_wait)
    g1_b = ClusterBroker("g1-b", tmp_path / "g1b", etcd.url, group="g1", extra=long_wait)
    g2_a = ClusterBroker("g2-a", tmp_path / "g2a", etcd.url, group="g2", replication="async")
    limits = ProxyLimits(send_timeout_s=3.0, send_attempt_timeout_s=1.0)
    with deployment(tmp_path, [g1_a, g1_b, g2_a], etcd, limits) as proxy:
        wait_until(lambda: masters(proxy) == {"g1": "g1-a", "g2": "g2-a"}, timeout=30)
        created = httpx.put(f"{proxy.url}/v1/topics/{TOPIC}", json={"write_queue_nums": 8})
        assert created.status_code == 201, created.text
        wait_until(lambda: in_sync(g1_a, g1_b), timeout=30)
        assert g1_b.process is not None
        os.kill(g1_b.process.pid, signal.SIGSTOP)
        answers = [
            httpx.post(
                f"{proxy.url}/v1/topics/{TOPIC}/messages", json={"body": f"stuck-{i}"}, timeout=30
            )
            for i in range(2)
        ]
        os.kill(g1_b.process.pid, signal.SIGCONT)
        for answer in answers:
            if answer.status_code == 201:
                assert answer.json()["broker_group"] == "g2"
                continue
            assert answer.status_code == 504, answer.text
            problem = answer.json()
            assert (problem["code"], problem["broker_group"]) == ("OUTCOME_UNKNOWN", "g1")
            assert "retry-after" not in answer.headers
        assert any(a.status_code == 504 for a in answers)  # round robin starts on g1's queues
        wait_until(lambda: set(stored_bodies(proxy, 8)) == {"stuck-0", "stuck-1"}, timeout=60)
        assert stored_bodies(proxy, 8) == Counter({"stuck-0": 1, "stuck-1": 1})


# ==================================================================== masters killed under load

ROUNDS = 6
"""Three kills per group, so every broker is killed as master at least once (g1-a and g2-a
twice, the second time after rejoining as a slave), and one kill per group comes while sends
wait on a stopped slave (rounds 2 and 5). ``bench/cluster_kill_soak.py`` runs the same loop
for many more rounds."""
PRODUCERS = 4  # with keys, and as many without
LOOP_BUDGET_S = 300.0  # a bound on a stuck loop; the rounds take ~30-45 s on 2 cores
RETRIED = (421, 503, 504)
"""Nothing stored (a slave, no master, a key index catching up), or an unknown outcome (504),
which only a keyed send may retry."""


@dataclass
class Ledger:
    """What the producers were told, per body."""

    acked: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)  # 504 OUTCOME_UNKNOWN, not retried
    unexpected: list[str] = field(default_factory=list)
    replays: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def grew(self, since: int) -> bool:
        return self.count() > since


class Producer(threading.Thread):
    """Sends bodies one at a time. With keys: every answer but 201 (or a 4xx) is retried
    with the same key until it comes. Without: a 503 (nothing stored) is sent again, a 504 is
    left unknown."""

    def __init__(self, name: str, url: str, keyed: bool, ledger: Ledger, stop: threading.Event):
        super().__init__(daemon=True)
        self.prefix, self.url, self.keyed = name, url, keyed
        self.ledger, self.stopping = ledger, stop
        self.give_up = threading.Event()  # after the stop, a last bound on keyed retries

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=60) as client:
            sent = 0
            while not self.stopping.is_set():
                sent += 1
                self._send(client, f"{self.prefix}-{sent}")

    def _send(self, client: httpx.Client, body: str) -> None:
        headers = {"Idempotency-Key": body} if self.keyed else {}
        while not self.give_up.is_set():
            try:
                answer = client.post(
                    f"/v1/topics/{TOPIC}/messages", json={"body": body}, headers=headers
                )
            except httpx.HTTPError as exc:  # the proxy itself is never killed
                self._note(f"{body}: {exc!r}")
                return
            if answer.status_code == 201:
                with self.ledger.lock:
                    self.ledger.acked.add(body)
                    self.ledger.replays += answer.headers.get("idempotent-replayed") == "true"
                return
            if answer.status_code == 504 and not self.keyed:
                assert answer.json()["code"] == "OUTCOME_UNKNOWN"
                with self.ledger.lock:
                    self.ledger.unknown.add(body)
                return
            if answer.status_code not in RETRIED:
                self._note(f"{body}: {answer.status_code} {answer.text[:300]}")
                return
            if self.stopping.is_set() and not self.keyed:
                return  # nothing was stored (421, 503): not sent after all
            time.sleep(0.05)

    def _note(self, what: str) -> None:
        with self.ledger.lock:
            self.ledger.unexpected.append(what)


def test_masters_killed_under_load_store_every_body_at_most_once(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    pairs = {
        group: [
            ClusterBroker(f"{group}-{n}", tmp_path / f"{group}{n}", etcd.url, group=group)
            for n in "ab"
        ]
        for group in ("g1", "g2")
    }
    brokers = [pairs["g1"][0], pairs["g2"][0], pairs["g1"][1], pairs["g2"][1]]
    ledgers = {"keyed": Ledger(), "plain": Ledger()}
    stop = threading.Event()
    with deployment(tmp_path, brokers, etcd, ProxyLimits()) as proxy:
        wait_until(lambda: masters(proxy) == {"g1": "g1-a", "g2": "g2-a"}, timeout=30)
        created = httpx.put(f"{proxy.url}/v1/topics/{TOPIC}", json={"write_queue_nums": 8})
        assert created.status_code == 201, created.text
        producers = [
            Producer(f"{kind}{i}", proxy.url, kind == "keyed", ledgers[kind], stop)
            for kind in ("keyed", "plain")
            for i in range(PRODUCERS)
        ]
        for producer in producers:
            producer.start()
        try:
            rounds = 0
            deadline = time.monotonic() + LOOP_BUDGET_S
            while rounds < ROUNDS and time.monotonic() < deadline:
                master, slave = pairs["g1" if rounds % 2 == 0 else "g2"]
                wait_until(partial(in_sync, master, slave), timeout=60)
                wait_until(partial(ledgers["keyed"].grew, ledgers["keyed"].count()), timeout=60)
                assert master.process is not None and slave.process is not None
                if rounds % 3 == 2:  # sends pile up waiting for the slave, then it catches up
                    os.kill(slave.process.pid, signal.SIGSTOP)
                    time.sleep(0.5)
                    os.kill(slave.process.pid, signal.SIGCONT)
                master.kill()
                wait_until(partial(is_master, slave), timeout=60)
                master.start()  # rejoins as slave, truncating what was never confirmed
                pairs[master.group] = [slave, master]
                rounds += 1
            assert rounds == ROUNDS
        finally:
            stop.set()
            for producer in producers:
                producer.join(timeout=60)
                producer.give_up.set()
            for producer in producers:
                producer.join(timeout=60)
        for master, slave in pairs.values():
            wait_until(partial(in_sync, master, slave), timeout=60)
        stored = stored_bodies(proxy, 8)
    keyed, plain = ledgers["keyed"], ledgers["plain"]
    assert keyed.unexpected == [] and plain.unexpected == []
    twice = {body: n for body, n in stored.items() if n > 1}
    assert twice == {}, f"stored more than once: {sorted(twice)[:10]}"
    assert keyed.acked <= set(stored) and plain.acked <= set(stored)
    assert keyed.acked == {b for b in stored if b.startswith("keyed")}  # every keyed send answered
    assert {b for b in stored if b.startswith("plain")} <= plain.acked | plain.unknown
    assert len(keyed.acked) > ROUNDS and len(plain.acked) > ROUNDS

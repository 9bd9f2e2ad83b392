"""A broker group in network namespaces for the partition tests: etcd, two brokers (one group)
and the proxy, each a real process in a namespace of its own (:mod:`tests.netns`), and the
test's producers in a ``client`` namespace that reaches all of them.

The producers keep what every answer said (:class:`Ledger`): through the proxy, keyed sends
retried with the same ``Idempotency-Key`` until answered; straight to each broker, keyed sends
that tell which broker acknowledged in which epoch (the ``Spoolmq-Epoch`` header). At the end
every queue is drained through the proxy and the invariants are checked
(:func:`check_invariants`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.etcd_support import ETCD_BINARY
from tests.netns import Network, network

BIN = Path(sys.executable).parent
PORT = 8080
HA_PORT = 10912
ETCD_PORT = 2379
TOPIC = "Parted"
QUEUES = 4
LEASE_TTL_S = 2
NODES = ("etcd", "g1-a", "g1-b", "proxy", "client")
BROKERS = ("g1-a", "g1-b")
TIMER_PRECISION_MS = 100
CATCH_UP_WINDOW_S = 5
"""A slave silent this long leaves the in-sync set (15 s by default): a cut-off slave is seen
sooner, and a loaded machine's lag spikes still stay well inside it."""
SYNC_FLUSH_TIMEOUT_MS = 1000
RETRIED = (421, 503, 504)
"""Nothing stored (a slave, no master), or an unknown outcome: retried with the same key."""


@dataclass
class NsProcess:
    """One process started by the test in a namespace; stopped by its PID."""

    net: Network
    node: str
    argv: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.net.exec_argv(self.node, self.argv),
                stdout=out,
                stderr=subprocess.STDOUT,
                env=dict(os.environ),
            )

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if not self.alive():
            return
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)


@dataclass
class Deployment:
    """etcd, g1-a and g1-b, the proxy: each in its namespace, on ``net``."""

    net: Network
    tmp: Path
    replication: str
    processes: dict[str, NsProcess] = field(default_factory=dict)

    def url(self, node: str) -> str:
        return f"http://{self.net.address(node)}:{PORT}"

    @property
    def etcd_url(self) -> str:
        return f"http://{self.net.address('etcd')}:{ETCD_PORT}"

    def start_etcd(self) -> None:
        argv = [
            ETCD_BINARY,
            "--name=partition",
            f"--data-dir={self.tmp / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=partition=http://127.0.0.1:2380",
            "--log-level=error",
        ]
        self._start("etcd", argv)
        self.wait(lambda: self.get("etcd", "/health", ETCD_PORT).get("health") == "true")

    def start_broker(self, name: str, *, wait: bool = True) -> None:
        """Start broker ``name`` (asking to be master: it is slave if the other holds the
        key); ``wait``: until it answers ready."""
        address = self.net.address(name)
        argv = [
            str(BIN / "spoolmq"), "serve",
            "--store-dir", str(self.tmp / name),
            "--host", address, "--port", str(PORT), "--allow-anonymous",
            "--role", "master", "--broker-name", name,
            "--ha-listen", f"{address}:{HA_PORT}",
            "--replication", self.replication,
            "--cluster", "test", "--etcd", self.etcd_url, "--broker-group", "g1",
            "--etcd-lease-ttl-s", str(LEASE_TTL_S),
            "--sync-flush-timeout-ms", str(SYNC_FLUSH_TIMEOUT_MS),
            "--commit-log-file-size", str(256 * 1024),
            "--consume-queue-units-per-file", "1000",
            "--config-sync-interval-s", "0.2",
            "--ha-heartbeat-s", "0.2",
            "--ha-catch-up-window-s", str(CATCH_UP_WINDOW_S),
            "--timer-precision-ms", str(TIMER_PRECISION_MS),
            "--log-level", os.environ.get("SPOOLMQ_TEST_LOG_LEVEL", "warning"),
        ]  # fmt: skip
        self._start(name, argv)
        if wait:
            self.wait(lambda: self.ready(name), 60)

    def start_proxy(self, *, wait: bool = True) -> None:
        argv = [
            str(BIN / "spoolmq"), "proxy", "--cluster", "test", "--etcd", self.etcd_url,
            "--host", self.net.address("proxy"), "--port", str(PORT), "--allow-anonymous",
            "--send-timeout-s", "8", "--send-attempt-timeout-s", "3",
            "--log-level", "warning",
        ]  # fmt: skip
        self._start("proxy", argv)
        if wait:
            self.wait(lambda: self.ready("proxy", "/healthz"), 60)

    def _start(self, node: str, argv: list[str]) -> None:
        process = NsProcess(self.net, node, argv, self.tmp / f"{node}.log")
        process.start()
        self.processes[node] = process

    def restart_if_exited(self, name: str) -> bool:
        """A master fenced after a partition exits (restarted, it rejoins as a slave)."""
        if self.processes[name].alive():
            return False
        self.start_broker(name)
        return True

    def stop_all(self) -> None:
        for node in ("proxy", "g1-b", "g1-a", "etcd"):
            if node in self.processes:
                self.processes[node].stop()

    # ------------------------------------------------------------ the client's view

    def get(self, node: str, path: str, port: int = PORT) -> dict[str, Any]:
        url = f"http://{self.net.address(node)}:{port}{path}"

        def ask() -> dict[str, Any]:
            try:
                answer = httpx.get(url, timeout=5)
                return dict(answer.json()) if answer.is_success else {}
            except (httpx.HTTPError, ValueError):
                return {}

        return self.net.call("client", ask)

    def ready(self, node: str, path: str = "/readyz") -> bool:
        return bool(self.net.call("client", lambda: _answers(f"{self.url(node)}{path}")))

    def role(self, name: str) -> str | None:
        role = self.get(name, "/v1/replication").get("role")
        return str(role) if role is not None else None

    def master_of_proxy(self) -> str | None:
        masters = self.get("proxy", "/healthz").get("masters") or {}
        master = masters.get("g1")
        return str(master) if master else None

    def in_sync(self, master: str, slave: str) -> bool:
        route = self.get(master, f"/v1/topics/{TOPIC}/route")
        groups = {g["group"]: g for g in route.get("groups", ())}
        return slave in groups.get("g1", {}).get("in_sync", ())

    def create_topic(self) -> None:
        def create() -> int:
            answer = httpx.put(
                f"{self.url('proxy')}/v1/topics/{TOPIC}",
                json={"write_queue_nums": QUEUES},
                timeout=30,
            )
            return answer.status_code

        assert self.net.call("client", create) in (200, 201)

    def stored_bodies(self) -> Counter[str]:
        """Every body in every queue of the topic, as often as it is stored (via the proxy)."""
        return Counter(m["body"] for m in self.stored_messages("proxy"))

    def stored_messages(self, node: str) -> list[dict[str, Any]]:
        """Every message in every queue of the topic, as ``node`` (a broker, the proxy)
        serves them."""

        def drain() -> list[dict[str, Any]]:
            messages: list[dict[str, Any]] = []
            with httpx.Client(base_url=self.url(node), timeout=30) as client:
                for queue_id in range(QUEUES):
                    offset = 0
                    while True:
                        answer = client.get(
                            f"/v1/topics/{TOPIC}/queues/{queue_id}/messages",
                            params={"offset": offset, "max_messages": 1024},
                        )
                        assert answer.status_code == 200, answer.text
                        page = answer.json()
                        if not page["messages"]:
                            break
                        messages.extend(page["messages"])
                        offset = page["next_offset"]
            return messages

        return self.net.call("client", drain)

    def post(self, node: str, path: str, body: dict[str, Any]) -> httpx.Response:
        """``POST path`` to ``node`` from the client namespace (one try)."""

        def send() -> httpx.Response:
            return httpx.post(f"{self.url(node)}{path}", json=body, timeout=30)

        return self.net.call("client", send)

    @staticmethod
    def wait(condition: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met within {timeout} s")
            time.sleep(0.05)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def other(broker: str) -> str:
    """The other broker of the group."""
    return "g1-b" if broker == "g1-a" else "g1-a"


def settle(deployed: Deployment) -> tuple[str, str]:
    """Heal every cut and wait until the group is whole again: one master, the proxy routing
    to it, the other broker its slave in sync (a fenced old master exits once etcd answers:
    it is restarted and rejoins as a slave). An election that healing sets off (etcd let
    the leases lapse meanwhile) is waited out too. Returns (master, slave)."""
    deployed.net.heal_all()
    whole: list[str] = []

    def settled() -> bool:
        master = _sole_master(deployed)
        if master is None:
            for name in BROKERS:
                deployed.restart_if_exited(name)
            return False
        if not rejoined(deployed, other(master)) or not deployed.in_sync(master, other(master)):
            return False
        whole[:] = [master]
        return True

    deployed.wait(settled, 180)
    return whole[0], other(whole[0])


def _sole_master(deployed: Deployment) -> str | None:
    """The master the proxy routes to, when that broker says it is master."""
    master = deployed.master_of_proxy()
    if master is None or deployed.role(master) != "master":
        return None
    return master


def rejoined(deployed: Deployment, name: str) -> bool:
    """``name`` answers as a slave; restarted first if it exited (fenced)."""
    if deployed.processes[name].alive():
        return deployed.role(name) == "slave"
    deployed.restart_if_exited(name)
    return False


@contextmanager
def deployment(tmp: Path, replication: str) -> Iterator[Deployment]:
    """The namespaces, etcd, then g1-a, g1-b and the proxy started together (the broker that
    campaigns first is master, the other its slave); all removed on the way out, whatever
    happened."""
    with network(NODES) as net:
        deployed = Deployment(net, tmp, replication)
        try:
            deployed.start_etcd()
            for name in BROKERS:
                deployed.start_broker(name, wait=False)
            deployed.start_proxy(wait=False)
            for name in BROKERS:
                deployed.wait(lambda n=name: deployed.ready(n), 60)
            deployed.wait(lambda: deployed.ready("proxy", "/healthz"), 60)
            deployed.wait(lambda: _sole_master(deployed) is not None)
            deployed.create_topic()
            settle(deployed)
            yield deployed
        finally:
            deployed.stop_all()


# ==================================================================== producers and ledger


@dataclass(frozen=True, slots=True)
class Ack:
    """One 2xx answer to a send."""

    body: str
    at: float  # monotonic
    status: str  # the receipt's: PUT_OK, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE, ...
    epoch: int
    broker: str | None  # the broker sent to directly (None: through the proxy)


@dataclass
class Ledger:
    """What the producers were told."""

    acks: list[Ack] = field(default_factory=list)
    refusals: Counter[str] = field(default_factory=Counter)  # "421", "503 NO_MASTER", ...
    unknown: set[str] = field(default_factory=set)  # never answered in the end
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ack: Ack) -> None:
        with self.lock:
            self.acks.append(ack)

    def refused(self, what: str) -> None:
        with self.lock:
            self.refusals[what] += 1

    def put_ok(self) -> set[str]:
        with self.lock:
            return {a.body for a in self.acks if a.status == "PUT_OK"}

    def count(self) -> int:
        with self.lock:
            return len(self.acks)

    def statuses(self) -> Counter[str]:
        with self.lock:
            return Counter(a.status for a in self.acks)


@dataclass
class Producers:
    """Keyed producers in the client namespace: ``through_proxy`` of them via the proxy, and
    one straight to each broker of ``direct``. Every body starts with ``tag`` (tests that
    share a deployment give each its own)."""

    deployed: Deployment
    ledger: Ledger
    tag: str = "run"
    through_proxy: int = 3
    direct: Sequence[str] = ("g1-a", "g1-b")
    stopping: threading.Event = field(default_factory=threading.Event)
    give_up: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Producers:
        net = self.deployed.net
        for i in range(self.through_proxy):
            url = self.deployed.url("proxy")
            self.threads.append(net.thread("client", self._loop(f"p{i}", url, None)))
        for name in self.direct:
            url = self.deployed.url(name)
            self.threads.append(net.thread("client", self._loop(f"d-{name}", url, name)))
        return self

    def stop(self) -> None:
        """Stop sending; keyed retries of the last bodies get a last bound to be answered."""
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=60)
        self.give_up.set()
        for thread in self.threads:
            thread.join(timeout=30)

    def _loop(self, prefix: str, url: str, broker: str | None) -> Any:
        def run() -> None:
            with httpx.Client(base_url=url, timeout=10) as client:
                sent = 0
                while not self.stopping.is_set():
                    sent += 1
                    self._send(client, f"{self.tag}-{prefix}-{sent}", broker)
                    if broker is not None:
                        time.sleep(0.02)  # a probe: enough to time the master's answers

        return run

    def _send(self, client: httpx.Client, body: str, broker: str | None) -> None:
        headers = {"Idempotency-Key": body}
        maybe_stored = False
        while not self.give_up.is_set():
            if broker is not None and maybe_stored and self.stopping.is_set():
                break  # a probe times the master's answers: its last body's fate is moot
            try:
                answer = client.post(
                    f"/v1/topics/{TOPIC}/messages", json={"body": body}, headers=headers
                )
            except httpx.HTTPError as exc:
                self.ledger.refused(type(exc).__name__)
                maybe_stored = True
                time.sleep(0.1)
                continue
            if answer.is_success:
                receipt = answer.json()["messages"][0]
                epoch = int(answer.headers["spoolmq-epoch"])
                self.ledger.add(Ack(body, time.monotonic(), receipt["status"], epoch, broker))
                return
            code = answer.json().get("code", "")
            self.ledger.refused(f"{answer.status_code} {code}".strip())
            if answer.status_code not in RETRIED:
                raise AssertionError(f"{body}: {answer.status_code} {answer.text[:300]}")
            maybe_stored = maybe_stored or answer.status_code == 504
            if broker is not None and not maybe_stored:
                return  # refused by that broker, nothing stored: the next body
            if broker is not None and answer.status_code == 421:
                break  # a slave now: it never answers for what it may have stored as master
            if self.stopping.is_set() and not maybe_stored:
                return
            time.sleep(0.05)
        with self.ledger.lock:
            self.ledger.unknown.add(body)


# ==================================================================== invariants


@dataclass
class Outcome:
    """What a nemesis run showed; :func:`check_invariants` asserts on it."""

    acked_put_ok: int
    lost: set[str]
    duplicates: dict[str, int]
    statuses: Counter[str]
    refusals: Counter[str]
    masters_per_epoch: dict[int, set[str]]
    stop_acking_s: float | None = None  # the isolated master's last PUT_OK after the cut
    failover_s: float | None = None  # from the cut to the new master's first ack

    def line(self, nemesis: str) -> str:
        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f}"

        others = {k: v for k, v in self.statuses.items() if k != "PUT_OK"}
        return (
            f"{nemesis}: acked {self.acked_put_ok}, lost {len(self.lost)}, "
            f"duplicates {len(self.duplicates)}, non-PUT_OK {dict(others) or '-'}, "
            f"stop acking {seconds(self.stop_acking_s)} s, failover {seconds(self.failover_s)} s"
        )


def outcome(ledger: Ledger, stored: Counter[str]) -> Outcome:
    put_ok = ledger.put_ok()
    per_epoch: dict[int, set[str]] = {}
    for ack in ledger.acks:
        if ack.broker is not None:
            per_epoch.setdefault(ack.epoch, set()).add(ack.broker)
    return Outcome(
        acked_put_ok=len(put_ok),
        lost=put_ok - set(stored),
        duplicates={body: n for body, n in stored.items() if n > 1},
        statuses=ledger.statuses(),
        refusals=Counter(ledger.refusals),
        masters_per_epoch=per_epoch,
    )


def timings(ledger: Ledger, isolated: str, cut_at: float) -> tuple[float | None, float | None]:
    """The isolated master's last PUT_OK after the cut, and the first ack of any other master
    after it, both in seconds from the cut."""
    with ledger.lock:
        acks = list(ledger.acks)
    last_old = max(
        (a.at for a in acks if a.broker == isolated and a.status == "PUT_OK" and a.at > cut_at),
        default=None,
    )
    first_new = min(
        (a.at for a in acks if a.broker not in (None, isolated) and a.at > cut_at), default=None
    )
    return (
        None if last_old is None else last_old - cut_at,
        None if first_new is None else first_new - cut_at,
    )


def check_invariants(result: Outcome) -> None:
    """No PUT_OK lost, nothing stored twice, one master per epoch."""
    assert result.lost == set(), f"acknowledged PUT_OK and lost: {sorted(result.lost)[:10]}"
    assert result.duplicates == {}, f"stored twice: {sorted(result.duplicates)[:10]}"
    split = {e: b for e, b in result.masters_per_epoch.items() if len(b) > 1}
    assert split == {}, f"two masters acknowledged in one epoch: {split}"

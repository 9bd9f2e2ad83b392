"""``spoolmq proxy --workers 2`` (:mod:`app.proxy.workers`) in front of the test cluster: both
workers answer sends and pulls over many connections, each answer names its worker, a worker
killed with SIGKILL is started again while the other serves, and SIGTERM to the proxy stops
every worker once the requests in flight are answered."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.proxy.context import ProxyLimits
from app.proxy.workers import ProxyService, bind_port, worker_header
from tests.app.proxy.support import CLUSTER, Cluster, create_topic
from tests.conftest import wait_until
from tests.net import free_port

BIN = Path(sys.executable).parent
TIMEOUT = httpx.Timeout(30)


@dataclass
class WorkersProxy:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def said(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def proxy_with_workers(
    cluster: Cluster, tmp_path: Path, workers: int = 2
) -> Iterator[WorkersProxy]:
    """``spoolmq proxy --workers N`` on a free port, once every worker answers."""
    port = free_port()
    log = tmp_path / "proxy.log"
    command = [str(BIN / "spoolmq"), "proxy", "--cluster", CLUSTER, "--etcd", cluster.etcd.url]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port), "--workers", str(workers)], stderr=out
        )
    proxy = WorkersProxy(process, f"http://127.0.0.1:{port}", log)
    try:
        wait_until(lambda: len(workers_answering(proxy)) == workers, timeout=120)
        yield proxy
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)


def worker_of(answer: httpx.Response) -> tuple[int, int]:
    """The slot and pid of the worker that answered (its X-Proxy-Worker header)."""
    slot, pid = answer.headers["x-proxy-worker"].split("; pid=")
    return int(slot), int(pid)


def workers_answering(proxy: WorkersProxy, connections: int = 40) -> dict[int, int]:
    """slot -> pid of the workers that answered ``/healthz`` on new connections."""
    seen: dict[int, int] = {}
    for _ in range(connections):
        try:
            answer = httpx.get(f"{proxy.url}/healthz", timeout=TIMEOUT)
        except httpx.TransportError:
            assert proxy.process.poll() is None, proxy.said()
            return {}
        if answer.status_code == 200:
            slot, pid = worker_of(answer)
            seen[slot] = pid
    return seen


def reaped(pid: int) -> bool:
    """Gone and collected by the proxy's parent process: all its threads, and sockets, closed."""
    return not Path(f"/proc/{pid}").exists()


def send_on_new_connection(proxy: WorkersProxy, topic: str, body: str) -> httpx.Response:
    answer = httpx.post(f"{proxy.url}/v1/topics/{topic}/messages", json={"body": body})
    assert answer.status_code == 201, answer.text
    return answer


def test_two_workers_serve_sends_and_pulls_over_many_connections(
    cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster.http, "Spread", 8)
    with proxy_with_workers(cluster, tmp_path) as proxy:
        sent = {f"m{i}": send_on_new_connection(proxy, "Spread", f"m{i}") for i in range(60)}
        send_workers = {worker_of(answer)[0] for answer in sent.values()}
        pulled: list[str] = []
        pull_workers = set()
        for _ in range(3):  # each queue from the start, three times over: 24 connections
            pulled.clear()
            for queue in range(8):
                answer = httpx.get(
                    f"{proxy.url}/v1/topics/Spread/queues/{queue}/messages",
                    params={"offset": 0, "max_messages": 32},
                    timeout=TIMEOUT,
                )
                assert answer.status_code == 200, answer.text
                pull_workers.add(worker_of(answer)[0])
                pulled += [m["body"] for m in answer.json()["messages"]]
        metrics = httpx.get(f"{proxy.url}/metrics", timeout=TIMEOUT)
    assert send_workers == pull_workers == {1, 2}
    assert sorted(pulled) == sorted(sent)
    assert metrics.status_code == 404  # the proxy keeps no counters: /metrics is the brokers'


def test_a_killed_worker_is_started_again_while_the_other_serves(
    cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster.http, "Healed", 4)
    with proxy_with_workers(cluster, tmp_path) as proxy:
        killed = workers_answering(proxy)[1]
        os.kill(killed, signal.SIGKILL)
        wait_until(lambda: reaped(killed))
        during = [send_on_new_connection(proxy, "Healed", f"d{i}") for i in range(20)]
        wait_until(lambda: workers_answering(proxy).get(1) not in (None, killed), timeout=120)
        after = [send_on_new_connection(proxy, "Healed", f"a{i}") for i in range(20)]
        assert proxy.process.poll() is None
    assert killed not in {worker_of(answer)[1] for answer in during}
    assert {worker_of(answer)[0] for answer in after} == {1, 2}
    assert f"worker 1 (pid {killed}) died after" in proxy.said()
    assert "(killed by SIGKILL): restarting it in" in proxy.said()


def test_sigterm_stops_every_worker_once_the_requests_in_flight_are_answered(
    cluster: Cluster, tmp_path: Path
) -> None:
    create_topic(cluster.http, "Quiet", 4)  # queue 0 is g1's (broker a)
    with proxy_with_workers(cluster, tmp_path) as proxy:
        pids = workers_answering(proxy).values()
        answers: list[httpx.Response] = []

        def long_poll() -> None:
            params = {"offset": 0, "max_messages": 1, "wait_ms": 3000}
            url = f"{proxy.url}/v1/topics/Quiet/queues/0/messages"
            answers.append(httpx.get(url, params=params, timeout=TIMEOUT))

        poller = threading.Thread(target=long_poll)
        poller.start()
        wait_until(lambda: parked_pulls(cluster) == 1)  # in flight, at the broker
        proxy.process.send_signal(signal.SIGTERM)
        poller.join(timeout=60)
        assert proxy.process.wait(timeout=60) == 0, proxy.said()
    assert [answer.status_code for answer in answers] == [200]
    assert answers[0].json()["messages"] == []
    assert all(reaped(pid) for pid in pids)


def parked_pulls(cluster: Cluster) -> float:
    page = httpx.get(f"{cluster.a.url}/metrics", timeout=TIMEOUT).text
    line = next(line for line in page.splitlines() if line.startswith("spoolmq_long_polls_parked"))
    return float(line.split()[-1])


def test_the_worker_header_names_the_slot_and_this_process() -> None:
    assert worker_header(3) == (b"x-proxy-worker", b"3; pid=%d" % os.getpid())


def test_several_workers_hold_the_port_without_listening_on_it() -> None:
    service = ProxyService("c", ("http://127.0.0.1:1",), "127.0.0.1", 0, ProxyLimits())
    sock, workers = bind_port(service, 2)
    with sock:
        assert workers == 2
        with pytest.raises(ConnectionRefusedError):  # the workers listen, the holder does not
            socket.create_connection(sock.getsockname(), timeout=10).close()


def test_one_worker_gets_a_plain_socket() -> None:
    service = ProxyService("c", ("http://127.0.0.1:1",), "127.0.0.1", 0, ProxyLimits())
    sock, workers = bind_port(service, 1)
    with sock:
        assert workers == 1

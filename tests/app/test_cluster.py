"""Election and failover through a real etcd, with real ``spoolmq serve`` processes."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.app.cluster_support import ClusterBroker
from tests.conftest import wait_until
from tests.etcd_support import EtcdServer


@pytest.fixture
def pair(tmp_path: Path, etcd: EtcdServer) -> Iterator[tuple[ClusterBroker, ClusterBroker]]:
    a = ClusterBroker("a", tmp_path / "a", etcd.url)
    b = ClusterBroker("b", tmp_path / "b", etcd.url)
    try:
        a.start()
        b.start()  # asked to be master too: a holds the key, so b follows a
        topic = {"read_queue_nums": 2, "write_queue_nums": 2}
        assert httpx.put(f"{a.url}/v1/topics/Clu", json=topic, timeout=10).status_code in (200, 201)
        yield a, b
    finally:
        b.stop()
        a.stop()


def send(url: str, body: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/topics/Clu/messages", json={"body": body, "queue_id": 0}, timeout=10
    )


def route(broker: ClusterBroker, topic: str = "Clu") -> httpx.Response:
    return httpx.get(f"{broker.url}/v1/topics/{topic}/route", timeout=10)


def in_sync(master: ClusterBroker, slave: ClusterBroker) -> bool:
    """The master counts the slave in sync and has published it in etcd (who may campaign)."""
    answer = route(master)
    return answer.status_code == 200 and slave.name in answer.json()["groups"][0]["in_sync"]


def test_two_brokers_elect_one_master_and_the_other_follows(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    a, b = pair
    assert a.role() == "master"
    assert b.role() == "slave"
    assert b.replica()["master"]["name"] == "a"
    wait_until(lambda: in_sync(a, b))
    assert send(a.url, "one").status_code == 201
    refused = send(b.url, "two")
    assert refused.status_code == 421
    assert refused.json()["master"] == a.url


def test_master_kill_promotes_the_in_sync_slave_with_the_next_epoch(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    a, b = pair
    wait_until(lambda: in_sync(a, b))
    acked = [send(a.url, f"before-{i}").json()["messages"][0]["msg_id"] for i in range(20)]
    epoch = a.replica()["epoch"]
    a.kill()
    statuses: set[int] = set()
    while True:  # writes to b answer 421, then 503 NO_MASTER, then 201 once it is master
        answer = send(b.url, "after")
        statuses.add(answer.status_code)
        if answer.status_code == 201:
            break
        assert answer.status_code in (421, 503), answer.text
        if answer.status_code == 503:
            assert answer.json()["code"] == "NO_MASTER"
            assert int(answer.headers["Retry-After"]) >= 1
    status = b.replica()
    assert status["role"] == "master"
    assert status["epoch"] == epoch + 1
    pulled = httpx.get(f"{b.url}/v1/topics/Clu/queues/0/messages", timeout=10).json()
    assert set(acked) <= {m["msg_id"] for m in pulled["messages"]}


def test_restarted_old_master_rejoins_as_slave(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    a, b = pair
    wait_until(lambda: in_sync(a, b))
    a.kill()
    wait_until(lambda: b.role() == "master")
    assert send(b.url, "on-b").status_code == 201
    a.start()  # asks for master; b holds the key
    assert a.role() == "slave"
    assert a.replica()["master"]["name"] == "b"
    wait_until(lambda: in_sync(b, a))


def test_etcd_down_master_keeps_serving_and_nobody_is_elected(
    pair: tuple[ClusterBroker, ClusterBroker], etcd: EtcdServer
) -> None:
    a, b = pair
    wait_until(lambda: in_sync(a, b))
    etcd.stop()
    sent = 0
    deadline = time.monotonic() + 4  # past the 2 s lease: nothing can be renewed
    while time.monotonic() < deadline:
        assert send(a.url, f"etcd-down-{sent}").status_code == 201
        sent += 1
        assert b.role() == "slave"
    assert a.role() == "master"
    assert b.replica()["master"]["name"] == "a"
    etcd.start()  # etcd back: the master still holds its key, nobody was elected
    wait_until(lambda: send(a.url, "after").status_code == 201)
    assert b.role() == "slave"


def test_route_names_the_group_master_slaves_and_in_sync_set(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    a, b = pair
    wait_until(lambda: in_sync(a, b))
    for broker in (a, b):  # any broker answers from the shared route table
        answer = route(broker).json()
        assert answer["topic"] == "Clu"
        assert answer["cluster"] == "test"
        assert answer["queues"] == [
            {"queue_id": 0, "group": "g1", "local_queue_id": 0},
            {"queue_id": 1, "group": "g1", "local_queue_id": 1},
        ]
        [group] = answer["groups"]
        assert group["master"]["name"] == "a"
        assert group["master"]["http_url"] == a.url
        assert [s["name"] for s in group["slaves"]] == ["b"]
        assert group["slaves"][0]["http_url"] == b.url
        assert group["in_sync"] == ["b"]
        assert group["epoch"] == a.replica()["epoch"]
    page = httpx.get(f"{b.url}/admin/cluster", timeout=10)
    assert page.status_code == 200
    for text in ("test (group g1)", "Clu", f'href="{a.url}/admin/cluster">a<', "slave"):
        assert text in page.text
    assert "Replicating from <strong>a</strong>" in page.text
    for i in range(5):
        assert send(a.url, f"lag-{i}").status_code == 201
    master_page = httpx.get(f"{a.url}/admin/cluster", timeout=10).text
    row = master_page.split('<td class="name">b</td>', 1)[1].split("</tr>", 1)[0]
    cells = [c.split(">", 1)[1] for c in row.split("</td>")[:4]]
    acked, lag_bytes, lag_seconds, in_sync_cell = (c.strip() for c in cells)
    assert int(acked) > 0 and int(lag_bytes) >= 0  # sync replication: answered once b had it
    assert lag_seconds == "—" or float(lag_seconds) >= 0
    assert in_sync_cell == "yes"
    missing = route(a, "NoSuchTopic")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")


def test_a_master_cut_off_past_its_lease_yields_to_the_new_master_and_exits(
    pair: tuple[ClusterBroker, ClusterBroker], tmp_path: Path
) -> None:
    a, b = pair
    wait_until(lambda: in_sync(a, b))
    assert a.process is not None
    a.process.send_signal(signal.SIGSTOP)  # frozen: no lease renewal, no answers
    try:
        wait_until(lambda: b.role() == "master", timeout=30)
    finally:
        a.process.send_signal(signal.SIGCONT)
    assert a.process.wait(timeout=30) == 1  # it sees b holding the key, fences itself, exits
    log = (tmp_path / "a.log").read_text()
    assert "spoolmq: stopped: broker a is no longer master of g1" in log
    assert send(b.url, "on-b").status_code == 201


def test_a_master_restarted_before_its_lease_lapses_does_not_follow_itself(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    a, b = pair
    wait_until(lambda: in_sync(a, b))
    assert send(a.url, "before").status_code == 201
    a.kill()
    a.start()  # its old master key is still there until the lease lapses: it waits it out
    wait_until(lambda: {a.role(), b.role()} == {"master", "slave"})
    master, slave = (a, b) if a.role() == "master" else (b, a)
    assert slave.replica()["master"]["name"] == master.name
    assert master.replica()["epoch"] > 1
    assert send(master.url, "after").status_code == 201


def test_a_master_stopped_cleanly_hands_over_at_once(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    a, b = pair
    wait_until(lambda: in_sync(a, b))
    epoch = a.replica()["epoch"]
    a.stop()  # revokes its lease: no waiting for a TTL
    assert a.process is not None and a.process.returncode == 0
    wait_until(lambda: b.role() == "master")
    assert b.replica()["epoch"] == epoch + 1
    assert send(b.url, "after-handover").status_code == 201


def test_a_topic_route_is_readable_on_the_slave_as_soon_as_the_put_answers(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    """The master registers the route before answering the PUT (not a second later, in its
    publish loop), so the next read anywhere finds it."""
    a, b = pair
    for i in range(3):
        topic = f"Fresh{i}"
        body = {"read_queue_nums": 4, "write_queue_nums": 4}
        created = httpx.put(f"{a.url}/v1/topics/{topic}", json=body, timeout=10)
        assert created.status_code == 201, created.text
        answer = route(b, topic)
        assert answer.status_code == 200, answer.text
        assert len(answer.json()["queues"]) == 4

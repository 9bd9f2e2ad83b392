"""``--min-in-sync-replicas 2`` in a group of two, through a real etcd with real ``spoolmq
serve`` processes: the master takes writes while its slave is in sync, refuses them (storing
nothing) while the slave is away, and takes them again once it has caught up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from app.cli import build_parser
from app.settings import Settings
from tests.app.cluster_support import ClusterBroker
from tests.conftest import wait_until
from tests.etcd_support import EtcdServer

TWO_OF_TWO = ["--min-in-sync-replicas", "2", "--sync-flush-timeout-ms", "3000"]


def test_the_flag_reaches_the_broker_config(tmp_path: Path) -> None:
    flags = ["serve", "--store-dir", str(tmp_path), "--replication", "sync"]
    args = build_parser().parse_args([*flags, "--ha-listen", "127.0.0.1:0", *TWO_OF_TWO])
    settings = Settings(**{k: v for k, v in vars(args).items() if k in Settings.model_fields})
    assert settings.broker_config().min_in_sync_replicas == 2
    assert Settings().broker_config().min_in_sync_replicas == 1  # today's behaviour
    with pytest.raises(ValidationError, match="needs --replication sync"):
        Settings(min_in_sync_replicas=2, ha_listen="127.0.0.1:0")
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        Settings(min_in_sync_replicas=0)


@pytest.fixture
def pair(tmp_path: Path, etcd: EtcdServer) -> Iterator[tuple[ClusterBroker, ClusterBroker]]:
    a = ClusterBroker("a", tmp_path / "a", etcd.url, extra=TWO_OF_TWO)
    b = ClusterBroker("b", tmp_path / "b", etcd.url, extra=TWO_OF_TWO)
    try:
        a.start()
        b.start()  # a holds the master key: b follows it
        topic = {"read_queue_nums": 1, "write_queue_nums": 1}
        assert httpx.put(f"{a.url}/v1/topics/Isr", json=topic, timeout=10).status_code in (200, 201)
        yield a, b
    finally:
        b.stop()
        a.stop()


def send(broker: ClusterBroker, body: str) -> httpx.Response:
    return httpx.post(
        f"{broker.url}/v1/topics/Isr/messages", json={"body": body, "queue_id": 0}, timeout=30
    )


def in_sync_replicas(broker: ClusterBroker) -> int:
    return int(broker.replica()["in_sync_replicas"])


def stored_bodies(broker: ClusterBroker) -> list[str]:
    answer = httpx.get(f"{broker.url}/v1/topics/Isr/queues/0/messages?offset=0", timeout=10)
    assert answer.status_code == 200, answer.text
    return [m["body"] for m in answer.json()["messages"]]


def metric(broker: ClusterBroker, name: str) -> str:
    page = httpx.get(f"{broker.url}/metrics", timeout=10).text
    [line] = [line for line in page.splitlines() if line.startswith(f"{name} ")]
    return line.split()[1]


def test_a_group_of_two_takes_writes_only_with_both_replicas_in_sync(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    a, b = pair
    assert a.role() == "master"
    wait_until(lambda: in_sync_replicas(a) == 2, timeout=60)
    assert a.replica()["min_in_sync_replicas"] == 2
    accepted = send(a, "both")
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["messages"][0]["status"] == "PUT_OK"

    b.stop()  # the slave goes: the master alone may not take writes
    wait_until(lambda: in_sync_replicas(a) == 1, timeout=60)
    end = a.replica()["max_physical_offset"]
    refused = send(a, "alone")
    assert refused.status_code == 503, refused.text
    assert refused.json()["code"] == "NOT_ENOUGH_IN_SYNC_REPLICAS"
    assert "Retry-After" in refused.headers
    assert a.replica()["max_physical_offset"] == end  # nothing was stored
    assert (metric(a, "spoolmq_in_sync_replicas"), metric(a, "spoolmq_min_in_sync_replicas")) == (
        "1",
        "2",
    )

    b.start()  # back as a's slave: writes resume once it has caught up
    wait_until(lambda: in_sync_replicas(a) == 2, timeout=60)
    again = send(a, "caught up")
    assert again.status_code == 201, again.text
    assert again.json()["messages"][0]["status"] == "PUT_OK"
    assert stored_bodies(a) == ["both", "caught up"]
    wait_until(lambda: b.replica()["max_physical_offset"] == a.replica()["max_physical_offset"])
    assert stored_bodies(b) == ["both", "caught up"]


def published_in_sync(master: ClusterBroker, slave: ClusterBroker) -> bool:
    """The master counts the slave in sync and has told etcd (so the slave may campaign)."""
    answer = httpx.get(f"{master.url}/v1/topics/Isr/route", timeout=10)
    return answer.status_code == 200 and slave.name in answer.json()["groups"][0]["in_sync"]


def test_after_a_failover_the_new_master_waits_for_the_old_one_to_catch_up(
    pair: tuple[ClusterBroker, ClusterBroker],
) -> None:
    a, b = pair
    wait_until(lambda: published_in_sync(a, b), timeout=60)
    assert send(a, "before").status_code == 201
    a.kill()

    def refused_for_want_of_replicas() -> bool:
        """b refuses: not master yet (421, 503 NO_MASTER), then master but alone (with N=1
        it would store the message on its disk only)."""
        refused = send(b, "alone")
        assert refused.status_code in (421, 503), refused.text
        return bool(refused.json()["code"] == "NOT_ENOUGH_IN_SYNC_REPLICAS")

    wait_until(refused_for_want_of_replicas, timeout=60)
    assert b.role() == "master"

    a.start()  # b holds the master key: a rejoins as its slave
    assert a.role() == "slave"
    wait_until(lambda: in_sync_replicas(b) == 2, timeout=60)
    again = send(b, "both again")
    assert again.status_code == 201, again.text
    assert again.json()["messages"][0]["status"] == "PUT_OK"
    assert stored_bodies(b) == ["before", "both again"]

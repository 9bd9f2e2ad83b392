"""A master and a slave, two real servers on 127.0.0.1: the slave's CommitLog is the master's,
byte for byte; it serves reads, refuses writes with 421 naming the master, copies configs."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, start_server, wait_until

FILE_SIZE = 64 * 1024  # the smallest CommitLog file the settings allow: the test rolls files
TOPICS = ("RepA", "RepB", "RepC")


def commit_log_bytes(store_dir: Path, up_to: int) -> bytes:
    """The CommitLog files of a store, concatenated from offset 0, cut at ``up_to``."""
    paths = sorted(p for p in (store_dir / "commitlog").iterdir() if p.name.isdigit())
    assert int(paths[0].name) == 0
    return b"".join(p.read_bytes() for p in paths)[:up_to]


def status(server: LiveServer) -> dict[str, Any]:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        response = client.get("/v1/replication")
        assert response.status_code == 200, response.text
        answer: dict[str, Any] = response.json()
        return answer


def pulled(client: httpx.Client, url: str) -> list[dict[str, Any]]:
    """Messages of a pull from offset 0; none while the topic is unknown there (404)."""
    response = client.get(url, params={"offset": 0})
    messages: list[dict[str, Any]] = response.json()["messages"] if response.is_success else []
    return messages


def caught_up(master: LiveServer, slave: LiveServer) -> bool:
    return bool(status(slave)["max_physical_offset"] == status(master)["max_physical_offset"])


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, LiveServer]]:
    master = start_server(
        tmp_path_factory.mktemp("master"),
        commit_log_file_size=FILE_SIZE,
        broker_name="master-1",
        ha_listen="127.0.0.1:0",
    )
    ha_address = master.broker.replica.ha_address
    assert ha_address is not None
    try:
        slave = start_server(
            tmp_path_factory.mktemp("slave"),
            commit_log_file_size=FILE_SIZE,
            broker_name="slave-1",
            role="slave",
            master_http=master.url,
            master_ha=ha_address,
            master_name="master-1",
            config_sync_interval_s=0.2,
        )
    except BaseException:
        master.stop()
        raise
    yield master, slave
    slave.stop()
    master.stop()


def test_slave_commit_log_is_the_masters(pair: tuple[LiveServer, LiveServer]) -> None:
    master, slave = pair
    client = master.client()
    for round_ in range(12):
        for topic in TOPICS:
            batch = {
                "messages": [{"body": f"{topic}-{round_}-{i}-" + "x" * 300} for i in range(10)],
                "queue_id": round_ % 4,
            }
            assert client.post(f"/v1/topics/{topic}/messages", json=batch).status_code == 201
        single = {"body": f"single-{round_}", "keys": [f"key-{round_}"], "queue_id": 0}
        assert client.post("/v1/topics/RepA/messages", json=single).status_code == 201
    end = status(master)["max_physical_offset"]
    assert end > 2 * FILE_SIZE  # files rolled
    wait_until(lambda: caught_up(master, slave))
    assert commit_log_bytes(slave.store_dir, end) == commit_log_bytes(master.store_dir, end)

    reader = slave.client()
    # the auto-created topics' configs come with the config sync
    wait_until(lambda: all(reader.get(f"/v1/topics/{t}").status_code == 200 for t in TOPICS))
    for topic in TOPICS:
        for queue_id in range(4):
            url = f"/v1/topics/{topic}/queues/{queue_id}/messages"
            params = {"offset": 0, "max_messages": 200}
            want = client.get(url, params=params).json()["messages"]
            got = reader.get(url, params=params).json()["messages"]  # read from the slave
            assert [(m["msg_id"], m["body"]) for m in got] == [
                (m["msg_id"], m["body"]) for m in want
            ]
            assert len(got) > 0
    found = reader.get("/v1/topics/RepA/messages", params={"key": "key-7"}).json()["messages"]
    assert [m["body"] for m in found] == ["single-7"]

    master_view = status(master)
    assert master_view["role"] == "master" and master_view["epoch"] >= 1
    assert [s["name"] for s in master_view["slaves"]] == ["slave-1"]
    assert master_view["sync_state_set"] == ["slave-1"]
    slave_view = status(slave)
    assert slave_view["role"] == "slave" and slave_view["connected"] is True
    assert slave_view["master"]["http_url"] == master.url
    assert slave_view["epoch"] == master_view["epoch"]


def test_slave_pull_wakes_on_replicated_messages(pair: tuple[LiveServer, LiveServer]) -> None:
    master, slave = pair
    reader = slave.client()
    url = "/v1/topics/RepLong/queues/0/messages"
    master.client().post("/v1/topics/RepLong/messages", json={"body": "first", "queue_id": 0})
    wait_until(lambda: pulled(reader, url) != [])  # the topic's config arrived too
    with httpx.Client(base_url=master.url, timeout=10) as writer:
        sender = threading.Timer(
            0.3,
            lambda: writer.post(
                "/v1/topics/RepLong/messages", json={"body": "later", "queue_id": 0}
            ),
        )
        sender.start()
        try:
            got = reader.get(url, params={"offset": 1, "wait_ms": 20_000}).json()
        finally:
            sender.join()
    assert [m["body"] for m in got["messages"]] == ["later"]


def test_a_pull_far_past_the_end_moves_the_consumer_on_the_master_only(
    pair: tuple[LiveServer, LiveServer],
) -> None:
    """RocketMQ's nextOffsetCorrection: the master answers where to go on (far past the end,
    the min offset when it is 0, else the max: the 4.x rule the reference follows); the slave,
    which may only be behind its master, leaves the consumer at the offset it asked for."""
    master, slave = pair
    writer, reader = master.client(), slave.client()
    queues = {"read_queue_nums": 2, "write_queue_nums": 2}
    assert writer.put("/v1/topics/RepFar", json=queues).status_code in (200, 201)
    for body in ("a", "b", "c"):
        writer.post("/v1/topics/RepFar/messages", json={"body": body, "queue_id": 0})
    url = "/v1/topics/RepFar/queues/{}/messages"
    wait_until(lambda: len(pulled(reader, url.format(0))) == 3)
    wait_until(lambda: reader.get(url.format(1)).status_code == 200)
    for server, moved_to in ((writer, 0), (reader, 1000)):
        badly = server.get(url.format(0), params={"offset": 1000}).json()
        assert (badly["status"], badly["next_offset"], badly["max_offset"]) == (
            "OFFSET_OVERFLOW_BADLY",
            moved_to,
            3,
        )
        empty = server.get(url.format(1), params={"offset": 1000}).json()
        assert (empty["status"], empty["next_offset"]) == ("NO_MESSAGE_IN_QUEUE", moved_to)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/topics/RepA/messages", {"body": "x"}),
        ("POST", "/v1/topics/RepA/messages", {"messages": [{"body": "x"}], "queue_id": 0}),
        ("PUT", "/v1/topics/RepNew", {}),
        ("DELETE", "/v1/topics/RepA", None),
        ("PUT", "/v1/groups/GSlave", {}),
        ("PUT", "/v1/groups/GSlave/topics/RepA/queues/0/offset", {"offset": 1}),
        ("POST", "/v1/groups/GSlave/offsets", {"offsets": []}),
        ("POST", "/v1/groups/GSlave/topics/RepA/receive", {}),
        ("POST", "/v1/groups/GSlave/acks", {"receipt_handles": []}),
        ("POST", "/v1/groups/GSlave/retry", {}),
        ("POST", "/v1/groups/GSlave/dlq/redrive", {}),
        ("POST", "/v1/groups/GSlave/offsets/reset", {}),
        ("GET", "/v1/groups/GSlave/topics/RepA/messages?auto_commit=true", None),
    ],
)
def test_slave_refuses_writes_naming_the_master(
    pair: tuple[LiveServer, LiveServer], method: str, path: str, body: Any
) -> None:
    master, slave = pair
    before = status(slave)["max_physical_offset"]
    response = slave.client().request(method, path, json=body)
    assert response.status_code == 421, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "NOT_MASTER"
    assert problem["master"] == master.url
    assert master.url in problem["detail"]
    assert status(slave)["max_physical_offset"] == before


def test_slave_reads_work(pair: tuple[LiveServer, LiveServer]) -> None:
    _, slave = pair
    reader = slave.client()
    for path in ("/v1/topics", "/v1/topics/RepA", "/v1/groups", "/v1/delays", "/admin/"):
        assert reader.get(path).status_code == 200, path
    pulled = reader.get("/v1/groups/GRead/topics/RepA/messages", params={"auto_commit": "false"})
    assert pulled.status_code == 200


def test_configs_follow_the_master(pair: tuple[LiveServer, LiveServer]) -> None:
    master, slave = pair
    client = master.client()
    created = client.put(
        "/v1/topics/RepConfigured", json={"read_queue_nums": 3, "write_queue_nums": 3}
    )
    assert created.status_code in (200, 201), created.text
    assert client.put("/v1/groups/GRep", json={}).status_code in (200, 201)
    for i in range(5):  # the topic the offset is committed on, whatever ran before
        sent = client.post("/v1/topics/RepA/messages", json={"body": f"c{i}", "queue_id": 0})
        assert sent.status_code == 201, sent.text
    commit = client.put("/v1/groups/GRep/topics/RepA/queues/0/offset", json={"offset": 5})
    assert commit.status_code == 200, commit.text
    reader = slave.client()

    def arrived() -> bool:
        topic = reader.get("/v1/topics/RepConfigured")
        offsets = reader.get("/v1/groups/GRep/offsets").json()
        queues = [
            q
            for t in offsets.get("topics", [])
            if t["topic"] == "RepA"
            for q in t["queues"]
            if q["queue_id"] == 0
        ]
        return topic.status_code == 200 and any(q["committed_offset"] == 5 for q in queues)

    wait_until(arrived)
    assert reader.get("/v1/topics/RepConfigured").json()["read_queue_nums"] == 3
    configs = master.client().get("/v1/replication/configs").json()
    assert set(configs) == {
        "topics",
        "subscription_groups",
        "consumer_offsets",
        "delay_offsets",
        "pop_state",
        "pop_secret",
        "timer_progress",
    }
    progress = configs["timer_progress"]  # the master's wheel runs: the slave copies it
    assert set(progress) == {"read_time_ms", "commit_offset"}
    wait_until(lambda: (slave.store_dir / "config" / "timerProgress.json").exists())


def test_epochs_route(pair: tuple[LiveServer, LiveServer]) -> None:
    master, slave = pair
    epochs = master.client().get("/v1/replication/epochs").json()["epochs"]
    assert epochs[-1]["epoch"] == status(master)["epoch"]
    assert epochs[0]["startOffset"] == 0
    wait_until(lambda: slave.client().get("/v1/replication/epochs").json()["epochs"] == epochs)


def test_openapi_documents_not_master(pair: tuple[LiveServer, LiveServer]) -> None:
    master, _ = pair
    document = master.client().get("/openapi.json").json()
    send = document["paths"]["/v1/topics/{topic}/messages"]["post"]["responses"]
    assert "NOT_MASTER" in send["421"]["description"]
    assert "421" not in document["paths"]["/v1/topics/{topic}"]["get"]["responses"]
    status = document["paths"]["/v1/replication"]["get"]
    assert status["operationId"] == "getReplicaStatus"


class SilentMaster:
    """A TCP port that takes the slave's connections and never answers: a master whose frames
    (and FIN) a partition swallows."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return  # closed
            self.accepted.append(connection)

    def close(self) -> None:
        self.listener.close()
        for connection in self.accepted:
            connection.close()


def test_a_slave_leaves_a_silent_master_and_connects_again(
    pair: tuple[LiveServer, LiveServer], tmp_path: Path
) -> None:
    master, _ = pair
    silent = SilentMaster()
    slave = start_server(
        tmp_path / "slave",
        broker_name="slave-2",
        role="slave",
        master_http=master.url,
        master_ha=silent.address,
        master_name="master-1",
        ha_heartbeat_s=0.2,  # silent for 1 s: gone
    )
    try:
        wait_until(lambda: len(silent.accepted) >= 2)
        view = status(slave)
        assert view["connected"] is False
        assert "sent nothing, not even a heartbeat, for 1 s" in view["error"]
    finally:
        slave.stop()
        silent.close()

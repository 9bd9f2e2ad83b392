"""Failover by hand: a slave promoted at run time takes writes in a new epoch; the old master,
restarted as its slave, cuts the tail nobody confirmed and re-replicates byte for byte."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.errors import ReplicaDivergedError
from services.ha import MasterAddress
from tests.conftest import LiveServer, start_server, wait_until

FILE_SIZE = 64 * 1024


def commit_log_bytes(store_dir: Path, up_to: int) -> bytes:
    paths = sorted(p for p in (store_dir / "commitlog").iterdir() if p.name.isdigit())
    assert int(paths[0].name) == 0
    return b"".join(p.read_bytes() for p in paths)[:up_to]


def replica(server: LiveServer) -> dict[str, Any]:
    answer: dict[str, Any] = httpx.get(f"{server.url}/v1/replication", timeout=10).json()
    return answer


def send_many(server: LiveServer, prefix: str, count: int) -> list[str]:
    ids = []
    with httpx.Client(base_url=server.url, timeout=10) as client:
        for i in range(count):
            body = {"body": f"{prefix}-{i}-" + "y" * 500, "queue_id": i % 2}
            response = client.post("/v1/topics/Fail/messages", json=body)
            assert response.status_code == 201, response.text
            ids.append(response.json()["messages"][0]["msg_id"])
    return ids


def pull_all(client: httpx.Client, queue_id: int) -> list[dict[str, Any]]:
    """Every message of a queue of topic Fail, pull after pull."""
    messages: list[dict[str, Any]] = []
    offset = 0
    while True:
        answer = client.get(
            f"/v1/topics/Fail/queues/{queue_id}/messages", params={"offset": offset}
        ).json()
        if not answer["messages"]:
            return messages
        messages += answer["messages"]
        offset = answer["next_offset"]


def run_on(server: LiveServer, coroutine: Any) -> Any:
    return asyncio.run_coroutine_threadsafe(coroutine, server.broker.loop).result(timeout=60)


def slave_settings(name: str, master: LiveServer) -> dict[str, Any]:
    ha_address = master.broker.replica.ha_address
    return {
        "commit_log_file_size": FILE_SIZE,
        "broker_name": name,
        "role": "slave",
        "master_http": master.url,
        "master_ha": ha_address or "127.0.0.1:1",
        "ha_listen": "127.0.0.1:0",  # used once promoted
        "config_sync_interval_s": 0.2,
    }


def test_promote_then_old_master_truncates_and_rejoins(tmp_path: Path) -> None:
    dir_a, dir_b = tmp_path / "a", tmp_path / "b"
    a = start_server(
        dir_a, commit_log_file_size=FILE_SIZE, broker_name="a", ha_listen="127.0.0.1:0"
    )
    b = start_server(dir_b, **slave_settings("b", a))
    try:
        send_many(a, "common", 150)  # rolls a file
        wait_until(lambda: replica(b)["max_physical_offset"] == replica(a)["max_physical_offset"])
        confirmed = replica(b)["max_physical_offset"]
        wait_until(lambda: httpx.get(f"{b.url}/v1/topics/Fail", timeout=10).status_code == 200)
        b.stop()
        lost = send_many(a, "unconfirmed", 20)  # only the old master has these
        assert replica(a)["max_physical_offset"] > confirmed
        dead_a_url = a.url
        a.stop()

        # b comes back as a slave of the dead master, then is promoted.
        b = start_server(dir_b, **slave_settings("b", a))
        assert replica(b)["max_physical_offset"] == confirmed
        run_on(b, b.broker.replica.promote(2))
        view = replica(b)
        assert (view["role"], view["epoch"]) == ("master", 2)
        epochs = json.loads((dir_b / "epoch.json").read_text())["epochs"]
        assert epochs[-1] == {"epoch": 2, "startOffset": confirmed}
        after = send_many(b, "new-epoch", 30)
        assert b.broker.replica.ha_address is not None

        # The old master restarts as b's slave: its unconfirmed tail goes.
        a = start_server(dir_a, **slave_settings("a", b))
        wait_until(lambda: replica(a)["max_physical_offset"] == replica(b)["max_physical_offset"])
        end = replica(b)["max_physical_offset"]
        assert commit_log_bytes(dir_a, end) == commit_log_bytes(dir_b, end)
        assert json.loads((dir_a / "epoch.json").read_text()) == json.loads(
            (dir_b / "epoch.json").read_text()
        )
        with httpx.Client(base_url=a.url, timeout=10) as reader:
            wait_until(lambda: reader.get("/v1/topics/Fail").status_code == 200)
            bodies = [m["body"].split("-")[0] for q in (0, 1) for m in pull_all(reader, q)]
            assert bodies.count("common") == 150
            assert bodies.count("new") == 30  # "new-epoch-..."
            assert "unconfirmed" not in bodies
            for msg_id in after[:3]:
                assert reader.get(f"/v1/messages/{msg_id}").status_code == 200
            for msg_id in lost[:3]:
                found = reader.get(f"/v1/messages/{msg_id}")
                assert found.status_code == 404 or "unconfirmed" not in found.json()["body"]
        assert dead_a_url != b.url
    finally:
        b.stop()
        a.stop()


def test_follow_refuses_a_diverged_master(tmp_path: Path) -> None:
    """A slave told to follow a master whose epochs do not confirm its tail fails clearly."""
    x = start_server(
        tmp_path / "x", commit_log_file_size=FILE_SIZE, broker_name="x", ha_listen="127.0.0.1:0"
    )
    y = start_server(
        tmp_path / "y", commit_log_file_size=FILE_SIZE, broker_name="y", ha_listen="127.0.0.1:0"
    )
    s = start_server(tmp_path / "s", **slave_settings("s", x))
    try:
        send_many(x, "x", 10)
        wait_until(lambda: replica(s)["max_physical_offset"] == replica(x)["max_physical_offset"])
        send_many(y, "y", 3)
        y.stop()  # y restarts as master: epoch 2 from its end, far below s's end
        y = start_server(
            tmp_path / "y", commit_log_file_size=FILE_SIZE, broker_name="y", ha_listen="127.0.0.1:0"
        )
        assert replica(y)["epoch"] == 2
        ha_y = y.broker.replica.ha_address
        assert ha_y is not None
        with pytest.raises(ReplicaDivergedError):
            run_on(s, s.broker.replica.follow(MasterAddress("y", y.url, ha_y)))
        assert "diverges" in (replica(s)["error"] or "")
    finally:
        s.stop()
        y.stop()
        x.stop()


def test_receipt_handles_issued_by_the_old_master_ack_on_the_promoted_slave(
    tmp_path: Path,
) -> None:
    a = start_server(
        tmp_path / "a", commit_log_file_size=FILE_SIZE, broker_name="a", ha_listen="127.0.0.1:0"
    )
    b = start_server(tmp_path / "b", **slave_settings("b", a))
    try:
        with httpx.Client(base_url=a.url, timeout=10) as http:
            assert http.put("/v1/groups/Workers", json={"consume_mode": "pop"}).is_success
            send_many(a, "job", 4)
            received = http.post(
                "/v1/groups/Workers/topics/Fail/receive",
                json={"max_messages": 4, "invisible_ms": 60000},
            ).json()["messages"]
        assert len(received) == 4
        # the CK records are in the replicated CommitLog; the handle secret comes with the configs
        wait_until(lambda: replica(b)["max_physical_offset"] == replica(a)["max_physical_offset"])
        secret = (tmp_path / "a" / "config" / "pop.secret").read_text()
        wait_until(lambda: (tmp_path / "b" / "config" / "pop.secret").read_text() == secret)
        wait_until(lambda: httpx.get(f"{b.url}/v1/topics/Fail", timeout=10).is_success)
        wait_until(lambda: httpx.get(f"{b.url}/v1/groups/Workers", timeout=10).is_success)
        a.stop()
        run_on(b, b.broker.replica.promote(2))
        with httpx.Client(base_url=b.url, timeout=10) as http:
            handles = [m["receipt_handle"] for m in received]
            answer = http.post("/v1/groups/Workers/acks", json={"receipt_handles": handles})
            assert answer.status_code == 200, answer.text
            assert [r["outcome"] for r in answer.json()["results"]] == ["acked"] * 4
            again = http.post(
                "/v1/groups/Workers/topics/Fail/receive", json={"max_messages": 4, "wait_ms": 0}
            )
            assert again.status_code == 200, again.text
            assert again.json()["messages"] == []  # in flight then acked: nothing comes back
    finally:
        b.stop()
        a.stop()

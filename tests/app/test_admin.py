"""Topics and groups CRUD, group pulls, offset commits, lag, restarts, health and docs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx

from tests.conftest import LiveServer, start_server, wait_until


def send(client: httpx.Client, topic: str, body: str, queue_id: int) -> None:
    response = client.post(
        f"/v1/topics/{topic}/messages", json={"body": body, "queue_id": queue_id}
    )
    assert response.status_code == 201, response.text


# ==================================================================== topics


def test_topic_crud(client: httpx.Client, topic: str) -> None:
    created = client.put(f"/v1/topics/{topic}", json={"read_queue_nums": 2, "write_queue_nums": 3})
    assert created.status_code == 201
    assert created.json()["read_queue_nums"] == 2
    assert [q["queue_id"] for q in created.json()["queues"]] == [0, 1, 2]
    updated = client.put(f"/v1/topics/{topic}", json={"read_queue_nums": 4, "write_queue_nums": 4})
    assert updated.status_code == 200
    send(client, topic, "a", 1)
    detail = client.get(f"/v1/topics/{topic}").json()
    assert detail["perm"] == 6 and detail["readable"] and detail["writeable"]
    queue1 = detail["queues"][1]
    assert (queue1["min_offset"], queue1["max_offset"]) == (0, 1)
    assert queue1["last_store_timestamp"] > 0
    assert detail["queues"][0]["last_store_timestamp"] == 0
    names = [t["topic"] for t in client.get("/v1/topics").json()["topics"]]
    assert topic in names and "SCHEDULE_TOPIC_XXXX" in names
    assert client.delete(f"/v1/topics/{topic}").status_code == 204
    assert client.get(f"/v1/topics/{topic}").status_code == 404
    assert client.delete(f"/v1/topics/{topic}").status_code == 404


def test_auto_created_topic_has_eight_queues(client: httpx.Client, topic: str) -> None:
    send(client, topic, "x", 0)
    detail = client.get(f"/v1/topics/{topic}").json()
    assert (detail["read_queue_nums"], detail["write_queue_nums"]) == (8, 8)


# ==================================================================== groups


def test_group_crud(client: httpx.Client, group: str) -> None:
    created = client.put(
        f"/v1/groups/{group}", json={"consume_from": "latest", "retry_max_times": 3}
    )
    assert created.status_code == 201
    assert created.json() == {
        "group": group,
        "consume_enable": True,
        "consume_from": "latest",
        "consume_from_timestamp": None,
        "retry_queue_nums": 1,
        "retry_max_times": 3,
        "consume_mode": None,
        "fifo": False,
        "filters": {},
    }
    updated = client.put(
        f"/v1/groups/{group}", json={"consume_from": "timestamp", "consume_from_timestamp": 1234}
    )
    assert updated.status_code == 200
    assert client.get(f"/v1/groups/{group}").json()["consume_from_timestamp"] == 1234
    assert group in [g["group"] for g in client.get("/v1/groups").json()["groups"]]
    assert client.delete(f"/v1/groups/{group}").status_code == 204
    assert client.get(f"/v1/groups/{group}").status_code == 404


def test_group_pull_across_queues_from_min_offset(
    client: httpx.Client, topic: str, group: str
) -> None:
    assert (
        client.put(
            f"/v1/topics/{topic}", json={"read_queue_nums": 3, "write_queue_nums": 3}
        ).status_code
        == 201
    )
    for queue_id in range(3):
        for i in range(2):
            send(client, topic, f"q{queue_id}-{i}", queue_id)
    got = client.get(f"/v1/groups/{group}/topics/{topic}/messages").json()
    assert sorted(m["body"] for m in got["messages"]) == sorted(
        f"q{q}-{i}" for q in range(3) for i in range(2)
    )
    assert all(q["offset"] == 0 and q["next_offset"] == 2 for q in got["queues"])
    # Without a commit the same messages come again (at-least-once).
    again = client.get(f"/v1/groups/{group}/topics/{topic}/messages").json()
    assert len(again["messages"]) == 6
    # Commit in one batch; the next pull finds nothing new.
    commits = [
        {"topic": topic, "queue_id": q["queue_id"], "offset": q["next_offset"]}
        for q in got["queues"]
    ]
    committed = client.post(f"/v1/groups/{group}/offsets", json={"offsets": commits})
    assert committed.status_code == 200
    assert len(committed.json()["offsets"]) == 3
    empty = client.get(f"/v1/groups/{group}/topics/{topic}/messages", params={"wait_ms": 50})
    assert empty.status_code == 200
    assert empty.json()["messages"] == []
    send(client, topic, "later", 1)
    later = client.get(f"/v1/groups/{group}/topics/{topic}/messages").json()
    assert [(m["body"], m["queue_id"], m["queue_offset"]) for m in later["messages"]] == [
        ("later", 1, 2)
    ]


def test_group_pull_limits_and_auto_commit(client: httpx.Client, topic: str, group: str) -> None:
    for i in range(10):
        send(client, topic, str(i), i % 2)
    first = client.get(
        f"/v1/groups/{group}/topics/{topic}/messages",
        params={"max_messages": 4, "auto_commit": True},
    ).json()
    assert len(first["messages"]) == 4
    rest = client.get(
        f"/v1/groups/{group}/topics/{topic}/messages", params={"max_messages": 100}
    ).json()
    assert len(rest["messages"]) == 6
    seen = {m["body"] for m in first["messages"]} | {m["body"] for m in rest["messages"]}
    assert seen == {str(i) for i in range(10)}


def test_consume_from_latest(client: httpx.Client, topic: str, group: str) -> None:
    send(client, topic, "before", 0)
    assert client.put(f"/v1/groups/{group}", json={"consume_from": "latest"}).status_code == 201
    assert client.get(f"/v1/groups/{group}/topics/{topic}/messages").json()["messages"] == []
    send(client, topic, "after", 0)
    got = client.get(f"/v1/groups/{group}/topics/{topic}/messages").json()
    assert [m["body"] for m in got["messages"]] == ["after"]


def test_single_queue_pull_with_group_position_and_commit(
    client: httpx.Client, topic: str, group: str
) -> None:
    for i in range(3):
        send(client, topic, str(i), 0)
    url = f"/v1/topics/{topic}/queues/0/messages"
    first = client.get(url, params={"group": group, "max_messages": 1}).json()
    assert [m["body"] for m in first["messages"]] == ["0"]
    # Piggy-backed commit: acknowledge and read on in one request.
    second = client.get(url, params={"group": group, "commit_offset": first["next_offset"]}).json()
    assert [m["body"] for m in second["messages"]] == ["1", "2"]
    offsets = client.get(f"/v1/groups/{group}/offsets").json()
    assert offsets["topics"][0]["queues"][0]["committed_offset"] == 1


def test_commit_and_lag(client: httpx.Client, topic: str, group: str) -> None:
    for i in range(5):
        send(client, topic, str(i), 0)
    send(client, topic, "other", 1)
    response = client.put(f"/v1/groups/{group}/topics/{topic}/queues/0/offset", json={"offset": 2})
    assert response.status_code == 200
    assert response.json() == {
        "group": group,
        "offsets": [{"topic": topic, "queue_id": 0, "offset": 2}],
    }
    client.put(f"/v1/groups/{group}/topics/{topic}/queues/1/offset", json={"offset": 0})
    report = client.get(f"/v1/groups/{group}/offsets").json()
    assert report["group"] == group
    assert report["total_lag"] == 4
    [entry] = report["topics"]
    assert entry["topic"] == topic
    assert entry["total_lag"] == 4
    queue0, queue1 = entry["queues"]
    assert (queue0["committed_offset"], queue0["max_offset"], queue0["lag"]) == (2, 5, 3)
    assert (queue1["committed_offset"], queue1["max_offset"], queue1["lag"]) == (0, 1, 1)
    assert queue0["last_commit_timestamp"] > 0
    assert (
        client.get(f"/v1/groups/{group}/offsets", params={"topic": "Other"}).json()["topics"] == []
    )


def test_offsets_and_configs_survive_a_restart(tmp_path: Path) -> None:
    store_dir = tmp_path / "restart"
    live = start_server(store_dir)
    client = live.client()
    client.put("/v1/topics/Kept", json={"read_queue_nums": 2, "write_queue_nums": 2})
    client.put("/v1/groups/keeper", json={"retry_max_times": 5})
    for i in range(3):
        send(client, "Kept", str(i), 0)
    client.put("/v1/groups/keeper/topics/Kept/queues/0/offset", json={"offset": 2})
    # The periodic task writes consumerOffset.json on its own...
    offsets_file = store_dir / "config" / "consumerOffset.json"
    wait_until(lambda: offsets_file.exists() and "Kept@keeper" in offsets_file.read_text())
    assert json.loads(offsets_file.read_text())["offsetTable"]["Kept@keeper"] == {"0": 2}
    client.put("/v1/groups/keeper/topics/Kept/queues/0/offset", json={"offset": 3})
    live.stop()  # ...and shutdown writes the last commit.
    assert not (store_dir / "abort").exists()

    again = start_server(store_dir)
    client = again.client()
    report = client.get("/v1/groups/keeper/offsets").json()
    assert report["topics"][0]["queues"][0]["committed_offset"] == 3
    assert client.get("/v1/topics/Kept").json()["read_queue_nums"] == 2
    assert client.get("/v1/groups/keeper").json()["retry_max_times"] == 5
    got = client.get("/v1/groups/keeper/topics/Kept/messages").json()
    assert [m["body"] for m in got["messages"] if m["queue_id"] == 0] == []
    client.put("/v1/groups/keeper/topics/Kept/queues/0/offset", json={"offset": 1})
    got = client.get("/v1/groups/keeper/topics/Kept/messages").json()
    assert [m["body"] for m in got["messages"]] == ["1", "2"]
    again.stop()


# ==================================================================== health and docs


def test_health_ready_and_metrics(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["state"] == "running"
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in (
        "spoolmq_up 1",
        "spoolmq_long_polls_parked",
        "spoolmq_pull_duration_seconds_bucket",
        "spoolmq_flush_lag_bytes",
        "spoolmq_disk_used_bytes",
        "spoolmq_commitlog_max_offset_bytes",
    ):
        assert name in metrics.text


def test_docs_are_served_from_local_files(client: httpx.Client) -> None:
    swagger = client.get("/docs").text
    assert "/static/swagger-ui/swagger-ui-bundle.js" in swagger
    assert "cdn." not in swagger and "https://" not in swagger.split("<body>")[0]
    redoc = client.get("/redoc").text
    assert "/static/redoc/redoc.standalone.js" in redoc and "https://" not in redoc
    for asset in (
        "/static/swagger-ui/swagger-ui-bundle.js",
        "/static/swagger-ui/swagger-ui.css",
        "/static/redoc/redoc.standalone.js",
    ):
        assert client.get(asset).status_code == 200
    assert client.get("/openapi.json").json()["info"]["title"] == "spoolmq"


def test_a_broker_that_cannot_start_is_not_ready(live_server: LiveServer) -> None:
    """A second server on the same store directory fails to lock it: 503 everywhere."""
    second = start_server(live_server.store_dir, ready=False)
    client = second.client()
    wait_until(lambda: client.get("/healthz").status_code == 503)
    problem = client.get("/readyz")
    assert problem.status_code == 503
    assert problem.json()["code"] == "BROKER_UNAVAILABLE"
    assert "in use by another process" in client.get("/healthz").json()["detail"]
    assert problem.headers["retry-after"] == "1"
    assert client.get("/v1/topics").status_code == 503
    second.stop()


def test_consume_from_timestamp(client: httpx.Client, topic: str, group: str) -> None:
    send(client, topic, "old", 0)
    detail = client.get(f"/v1/topics/{topic}").json()
    after_old = detail["queues"][0]["last_store_timestamp"] + 1
    wait_until(lambda: time.time() * 1000 > after_old + 5)
    send(client, topic, "new", 0)
    body = {"consume_from": "timestamp", "consume_from_timestamp": after_old}
    assert client.put(f"/v1/groups/{group}", json=body).status_code == 201
    got = client.get(f"/v1/groups/{group}/topics/{topic}/messages").json()
    assert [m["body"] for m in got["messages"]] == ["new"]

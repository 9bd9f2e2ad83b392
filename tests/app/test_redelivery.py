"""Issue 5 over HTTP: delayed delivery, send-back to retry and DLQ, lookups by key and time,
offset reset previews and DLQ redrive — against a live server with a short delay table."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, start_server, wait_until

# Level n waits n seconds: the whole module stays fast, and delays are still observable.
DELAYS = " ".join(f"{n}s" for n in range(1, 19))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("store"), message_delay_levels=DELAYS)
    yield live
    live.stop()


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=40) as client:
        yield client


def send(http: httpx.Client, topic: str, **message: Any) -> dict[str, Any]:
    response = http.post(f"/v1/topics/{topic}/messages", json=message)
    assert response.status_code == 201, response.text
    receipt: dict[str, Any] = response.json()["messages"][0]
    return receipt


def pull_all(http: httpx.Client, topic: str, queues: int = 8) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for queue_id in range(queues):
        response = http.get(
            f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"max_messages": 1000}
        )
        if response.status_code == 200:
            found.extend(response.json()["messages"])
    return found


def group_pull(http: httpx.Client, group: str, topic: str, wait_ms: int = 0) -> dict[str, Any]:
    response = http.get(
        f"/v1/groups/{group}/topics/{topic}/messages",
        params={"wait_ms": wait_ms, "max_messages": 100},
    )
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def commit_all(http: httpx.Client, group: str, pulled: dict[str, Any]) -> None:
    commits = [
        {"topic": q["topic"], "queue_id": q["queue_id"], "offset": q["next_offset"]}
        for q in pulled["queues"]
        if q["next_offset"] != q["offset"]
    ]
    if commits:
        response = http.post(f"/v1/groups/{group}/offsets", json={"offsets": commits})
        assert response.status_code == 200, response.text


# ---------------------------------------------------------------- delayed delivery


def test_delayed_message_is_invisible_before_its_time_and_visible_after(
    http: httpx.Client, topic: str
) -> None:
    receipt = send(http, topic, body="later", delay_level=2, tags="T")
    assert receipt["delay_level"] == 2
    assert receipt["queue_offset"] == -1
    assert receipt["deliver_at"] - receipt["store_timestamp"] == 2000
    time.sleep(0.8)
    assert pull_all(http, topic) == [], "a delayed message is not visible early"
    wait_until(lambda: pull_all(http, topic) != [], timeout=15)
    [message] = pull_all(http, topic)
    assert message["body"] == "later"
    assert message["tags"] == "T"
    assert message["queue_id"] == receipt["queue_id"]
    assert message["store_timestamp"] >= receipt["deliver_at"]
    assert "DELAY" not in message["properties"]


def test_delay_levels_stay_rocketmq_4s_and_a_batch_cannot_use_them(
    http: httpx.Client, topic: str
) -> None:
    receipt = send(http, topic, body="x", delay_level=3)
    assert (receipt["delay_level"], receipt["timer_handle"]) == (3, None)
    batch = http.post(
        f"/v1/topics/{topic}/messages",
        json={"messages": [{"body": "a", "delay_level": 1}, {"body": "b"}]},
    )
    assert batch.status_code == 422
    assert batch.json()["code"] == "BATCH_REJECTED"
    levels = http.get("/v1/delays").json()["levels"]
    assert [level["delay_ms"] for level in levels[:3]] == [1000, 2000, 3000]


def test_restart_in_the_middle_of_a_delay_delivers_every_message(tmp_path: Path) -> None:
    live = start_server(tmp_path / "store", message_delay_levels=DELAYS)
    topic = "RestartDelay"
    try:
        with httpx.Client(base_url=live.url, timeout=40) as client:
            for i in range(6):
                send(client, topic, body=f"m{i}", delay_level=3, queue_id=0)
    finally:
        live.stop()
    live = start_server(tmp_path / "store", message_delay_levels=DELAYS)
    try:
        with httpx.Client(base_url=live.url, timeout=40) as client:
            wait_until(lambda: len(pull_all(client, topic, 1)) >= 6, timeout=20)
            time.sleep(0.5)
            bodies = sorted(m["body"] for m in pull_all(client, topic, 1))
            assert bodies == [f"m{i}" for i in range(6)]
    finally:
        live.stop()


# ---------------------------------------------------------------- send-back and DLQ


def test_sent_back_message_returns_after_each_delay_then_lands_in_the_dlq(
    http: httpx.Client, topic: str, group: str
) -> None:
    assert http.put(f"/v1/groups/{group}", json={"retry_max_times": 2}).status_code in (200, 201)
    first = send(http, topic, body="poison", tags="bad", keys=["order-1"])
    pulled = group_pull(http, group, topic)
    [message] = pulled["messages"]
    commit_all(http, group, pulled)
    for attempt in range(1, 3):
        back = http.post(f"/v1/groups/{group}/retry", json={"msg_id": message["msg_id"]})
        assert back.status_code == 200, back.text
        answer = back.json()
        assert answer["destination"] == "RETRY"
        assert answer["topic"] == f"%RETRY%{group}"
        assert answer["reconsume_times"] == attempt
        assert answer["origin_msg_id"] == first["msg_id"]
        assert answer["delay_level"] == 2 + attempt  # 3 + reconsume_times before
        assert group_pull(http, group, topic)["messages"] == [], "not back before its delay"
        deadline = time.monotonic() + 15
        while True:
            pulled = group_pull(http, group, topic, wait_ms=2000)
            if pulled["messages"] or time.monotonic() > deadline:
                break
        [message] = pulled["messages"]
        assert message["topic"] == topic, "a retry comes back under its original topic"
        assert message["queue_topic"] == f"%RETRY%{group}"
        assert message["reconsume_times"] == attempt
        assert message["body"] == "poison"
        assert time.time() * 1000 >= answer["deliver_at"]
        commit_all(http, group, pulled)
    final = http.post(f"/v1/groups/{group}/retry", json={"msg_id": message["msg_id"]}).json()
    assert final["destination"] == "DLQ"
    dead = http.get(f"/v1/groups/{group}/dlq/messages").json()
    assert [m["body"] for m in dead["messages"]] == ["poison"]
    assert dead["messages"][0]["original_topic"] == topic
    assert dead["messages"][0]["reconsume_times"] == 3


def test_send_back_rejects_unknown_and_ambiguous_references(http: httpx.Client, group: str) -> None:
    missing = http.post(f"/v1/groups/{group}/retry", json={"commit_log_offset": 10**12})
    assert missing.status_code == 404
    both = http.post(f"/v1/groups/{group}/retry", json={"msg_id": "0" * 32, "commit_log_offset": 0})
    assert both.status_code == 422


# ---------------------------------------------------------------- lookups


def test_lookups_by_key_by_uniq_key_and_by_time(http: httpx.Client, topic: str) -> None:
    before = int(time.time() * 1000) - 1
    receipts = [send(http, topic, body=f"b{i}", keys=[f"k{i}"], queue_id=0) for i in range(5)]
    by_key = http.get(f"/v1/topics/{topic}/messages", params={"key": "k3"}).json()
    assert [m["body"] for m in by_key["messages"]] == ["b3"]
    by_uniq = http.get(f"/v1/messages/{receipts[2]['uniq_key']}")
    assert by_uniq.status_code == 200 and by_uniq.json()["body"] == "b2"
    by_id = http.get(f"/v1/messages/{receipts[4]['msg_id']}")
    assert by_id.json()["body"] == "b4"
    seek = http.get(
        f"/v1/topics/{topic}/queues/0/offset",
        params={"timestamp": receipts[3]["store_timestamp"]},
    ).json()
    assert seek["offset"] <= 3 and seek["store_timestamp"] <= receipts[3]["store_timestamp"] + 0
    stored_at_or_after = [r for r in receipts if r["store_timestamp"] >= seek["timestamp"]]
    assert seek["offset"] == receipts.index(stored_at_or_after[0])
    assert (
        http.get(f"/v1/topics/{topic}/queues/0/offset", params={"timestamp": before}).json()[
            "offset"
        ]
        == 0
    )
    future = http.get(
        f"/v1/topics/{topic}/queues/0/offset", params={"timestamp": 2 * 10**12}
    ).json()
    # RocketMQ's searchOffset: when every message is earlier, the last one (max offset - 1);
    # the lower boundary answers the max offset (nothing is stored that late).
    assert future["max_offset"] == 5
    assert future["offset"] == 4
    lower = http.get(
        f"/v1/topics/{topic}/queues/0/offset",
        params={"timestamp": 2 * 10**12, "boundary": "lower"},
    ).json()
    assert lower["offset"] == 5
    assert (
        http.get(
            f"/v1/topics/{topic}/queues/0/offset", params={"timestamp": 1, "boundary": "upper"}
        ).status_code
        == 422
    )


# ---------------------------------------------------------------- offset reset


def test_reset_preview_matches_what_the_reset_then_does(
    http: httpx.Client, topic: str, group: str
) -> None:
    assert http.put(
        f"/v1/topics/{topic}", json={"read_queue_nums": 2, "write_queue_nums": 2}
    ).status_code in (200, 201)
    receipts = [send(http, topic, body=f"m{i}", queue_id=i % 2) for i in range(10)]
    commit = {"offsets": [{"topic": topic, "queue_id": 0, "offset": 4}]}
    assert http.post(f"/v1/groups/{group}/offsets", json=commit).status_code == 200
    middle = receipts[4]["store_timestamp"]  # queue 0, offset 2
    body = {"to": "timestamp", "topic": topic, "timestamp": middle, "dry_run": True}
    preview = http.post(f"/v1/groups/{group}/offsets/reset", json=body).json()
    assert preview["applied"] is False
    queues = {q["queue_id"]: q for q in preview["queues"]}
    assert queues[0]["current_offset"] == 4
    assert queues[0]["redelivered"] == 4 - queues[0]["target_offset"]
    offsets_before = http.get(f"/v1/groups/{group}/offsets").json()
    real = http.post(f"/v1/groups/{group}/offsets/reset", json={**body, "dry_run": False}).json()
    assert real["applied"] is True
    assert [q["target_offset"] for q in real["queues"]] == [
        q["target_offset"] for q in preview["queues"]
    ]
    after = http.get(f"/v1/groups/{group}/offsets").json()
    assert after != offsets_before
    committed = {q["queue_id"]: q["committed_offset"] for q in after["topics"][0]["queues"]}
    assert committed == {q["queue_id"]: q["target_offset"] for q in preview["queues"]}
    latest = http.post(
        f"/v1/groups/{group}/offsets/reset", json={"to": "latest", "dry_run": True}
    ).json()
    assert latest["skipped"] == sum(5 - q["target_offset"] for q in preview["queues"])
    bad = http.post(
        f"/v1/groups/{group}/offsets/reset",
        json={"to": "offsets", "topic": topic, "offsets": {"0": 99}},
    )
    assert (bad.status_code, bad.json()["code"]) == (409, "INVALID_OFFSET")
    assert (
        http.post("/v1/groups/NoSuchGroup_x/offsets/reset", json={"to": "earliest"}).status_code
        == 404
    )


# ---------------------------------------------------------------- DLQ redrive


def test_redrive_moves_exactly_the_filtered_messages_and_reports_each(
    http: httpx.Client, topic: str, group: str
) -> None:
    for i in range(6):
        receipt = send(http, topic, body=f"dead {i}", tags="odd" if i % 2 else "even")
        answer = http.post(
            f"/v1/groups/{group}/retry", json={"msg_id": receipt["msg_id"], "delay_level": -1}
        ).json()
        assert answer["destination"] == "DLQ"
    request = {"tags": ["odd"], "dry_run": True}
    preview = http.post(f"/v1/groups/{group}/dlq/redrive", json=request).json()
    assert preview["summary"]["would_move"] == 3
    assert {o["status"] for o in preview["outcomes"]} == {"WOULD_MOVE"}
    assert len(pull_all(http, topic)) == 6, "a dry run sends nothing"
    real = http.post(f"/v1/groups/{group}/dlq/redrive", json={"tags": ["odd"]}).json()
    assert real["summary"] == {
        "selected": 3,
        "would_move": 0,
        "moved": 3,
        "already_moved": 0,
        "failed": 0,
    }
    moved = [m for m in pull_all(http, topic) if "REDRIVEN_FROM" in m["properties"]]
    assert sorted(m["body"] for m in moved) == ["dead 1", "dead 3", "dead 5"]
    assert {m["properties"]["REDRIVEN_FROM"] for m in moved} == {
        o["dlq_msg_id"] for o in real["outcomes"]
    }
    assert all(m["reconsume_times"] == 0 for m in moved)
    again = http.post(f"/v1/groups/{group}/dlq/redrive", json={"tags": ["odd"]}).json()
    assert again["summary"]["already_moved"] == 3
    assert len(pull_all(http, topic)) == 9, "a re-run sends nothing twice"
    page = http.get(f"/v1/groups/{group}/dlq/messages", params={"limit": 10, "state": "all"}).json()
    redriven = sorted(m["body"] for m in page["messages"] if m["redriven_as"])
    assert redriven == ["dead 1", "dead 3", "dead 5"]
    # By default only what still waits is listed; the counts say both.
    waiting = http.get(f"/v1/groups/{group}/dlq/messages", params={"limit": 10}).json()
    assert sorted(m["body"] for m in waiting["messages"]) == ["dead 0", "dead 2", "dead 4"]
    assert waiting["stored"] == 6 and waiting["redriven"] + waiting["waiting"] == 6
    only_redriven = http.get(f"/v1/groups/{group}/dlq/messages", params={"state": "redriven"})
    assert sorted(m["body"] for m in only_redriven.json()["messages"]) == redriven


def test_lag_in_seconds_is_the_age_of_the_oldest_unconsumed_message(
    http: httpx.Client, topic: str, group: str
) -> None:
    first = send(http, topic, body="old", queue_id=0)
    time.sleep(1.2)
    send(http, topic, body="new", queue_id=0)
    commit = {"offsets": [{"topic": topic, "queue_id": 0, "offset": 0}]}
    assert http.post(f"/v1/groups/{group}/offsets", json=commit).status_code == 200
    [queue] = http.get(f"/v1/groups/{group}/offsets").json()["topics"][0]["queues"]
    assert queue["lag"] == 2
    age = time.time() - first["store_timestamp"] / 1000
    assert 1.0 <= queue["lag_seconds"] <= age + 0.5
    commit["offsets"][0]["offset"] = 2
    assert http.post(f"/v1/groups/{group}/offsets", json=commit).status_code == 200
    [queue] = http.get(f"/v1/groups/{group}/offsets").json()["topics"][0]["queues"]
    assert (queue["lag"], queue["lag_seconds"]) == (0, 0.0)


def test_a_waiting_retry_counts_in_the_groups_lag_before_its_first_pull_there(
    http: httpx.Client, topic: str, group: str
) -> None:
    sent = send(http, topic, body="flaky", queue_id=0)
    pulled = group_pull(http, group, topic)
    commit_all(http, group, pulled)
    assert http.get(f"/v1/groups/{group}/offsets").json()["total_lag"] == 0
    back = http.post(f"/v1/groups/{group}/retry", json={"msg_id": sent["msg_id"], "delay_level": 1})
    assert back.status_code == 200, back.text
    retry = f"%RETRY%{group}"

    def lag_by_topic() -> dict[str, int]:
        report = http.get(f"/v1/groups/{group}/offsets").json()
        return {t["topic"]: t["total_lag"] for t in report["topics"]}

    wait_until(lambda: retry in lag_by_topic())  # once the retry is back from its delay
    assert lag_by_topic() == {topic: 0, retry: 1}
    report = http.get(f"/v1/groups/{group}/offsets").json()
    assert report["total_lag"] == 1
    [queue] = next(t for t in report["topics"] if t["topic"] == retry)["queues"]
    assert (queue["committed_offset"], queue["max_offset"], queue["lag"]) == (0, 1, 1)
    only_retry = http.get(f"/v1/groups/{group}/offsets", params={"topic": retry}).json()
    assert only_retry["total_lag"] == 1
    pulled = group_pull(http, group, topic)
    assert [m["body"] for m in pulled["messages"]] == ["flaky"]
    commit_all(http, group, pulled)
    assert lag_by_topic() == {topic: 0, retry: 0}

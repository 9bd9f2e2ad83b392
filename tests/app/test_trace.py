"""Message trace over HTTP: a real server traces a message's whole life, a cancelled timer and
a rolled-back transaction; a broker killed with ``kill -9`` never shows a delivery that did
not happen; the lookup's errors."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, start_server, wait_until
from tests.serve_process import ServeProcess

DELAYS = " ".join(["1s"] * 18)  # every retry delay level is 1 s: nacked messages return fast
CLIENT = {"X-Client-Id": "worker-7"}
Json = dict[str, Any]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(
        tmp_path_factory.mktemp("trace"),
        message_delay_levels=DELAYS,
        transaction_timeout_ms=600_000,
        transaction_check_interval_ms=600_000,
    )
    yield live
    live.stop()


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture
def names() -> tuple[str, str, str]:
    suffix = uuid.uuid4().hex[:10]
    return f"T_{suffix}", f"Gpull_{suffix}", f"Gpop_{suffix}"


def traced_topic(http: httpx.Client, topic: str, *, trace: bool | None = True) -> None:
    body = {"read_queue_nums": 1, "write_queue_nums": 1, "trace": trace}
    response = http.put(f"/v1/topics/{topic}", json=body)
    assert response.status_code in (200, 201), response.text
    assert response.json()["trace"] is trace


def send(http: httpx.Client, topic: str, **message: Any) -> Json:
    response = http.post(f"/v1/topics/{topic}/messages", json={"body": "order 42", **message})
    assert response.status_code == 201, response.text
    [receipt] = response.json()["messages"]
    return dict(receipt)


def receive(http: httpx.Client, group: str, topic: str) -> Json:
    body = {"invisible_ms": 60_000, "wait_ms": 10_000}
    response = http.post(f"/v1/groups/{group}/topics/{topic}/receive", json=body, headers=CLIENT)
    assert response.status_code == 200, response.text
    [message] = response.json()["messages"]
    return dict(message)


def nack(http: httpx.Client, group: str, handle: str) -> None:
    body = {"receipt_handle": handle, "invisible_ms": 0}
    response = http.post(f"/v1/groups/{group}/invisibility", json=body, headers=CLIENT)
    assert response.status_code == 200, response.text


def ack(http: httpx.Client, group: str, handle: str) -> None:
    body = {"receipt_handles": [handle]}
    response = http.post(f"/v1/groups/{group}/acks", json=body, headers=CLIENT)
    assert response.status_code == 200, response.text
    assert response.json()["results"][0]["outcome"] == "acked"


def pull_and_commit(http: httpx.Client, group: str, topic: str) -> None:
    pulled = http.get(f"/v1/groups/{group}/topics/{topic}/messages", headers=CLIENT)
    assert pulled.status_code == 200, pulled.text
    assert len(pulled.json()["messages"]) == 1
    [queue] = [q for q in pulled.json()["queues"] if q["topic"] == topic]
    url = f"/v1/groups/{group}/topics/{topic}/queues/0/offset"
    committed = http.put(url, json={"offset": queue["next_offset"]}, headers=CLIENT)
    assert committed.status_code == 200, committed.text


def trace(http: httpx.Client, msg_id: str) -> Json:
    response = http.get(f"/v1/messages/{msg_id}/trace")
    assert response.status_code == 200, response.text
    return dict(response.json())


def steps(timeline: Json) -> list[tuple[str, str | None, int | None]]:
    return [(e["type"], e["group"], e["attempt"]) for e in timeline["events"]]


def test_a_message_s_whole_life_is_one_ordered_timeline(
    http: httpx.Client, names: tuple[str, str, str]
) -> None:
    topic, puller, popper = names
    traced_topic(http, topic)
    group = {"retry_max_times": 1, "consume_mode": "pop"}
    assert http.put(f"/v1/groups/{popper}", json=group).status_code == 201
    receipt = send(http, topic, keys=["order-42"])
    msg_id = receipt["uniq_key"]

    pull_and_commit(http, puller, topic)
    first = receive(http, popper, topic)
    nack(http, popper, first["receipt_handle"])
    second = receive(http, popper, topic)  # from the retry topic, a second later
    assert second["delivery_attempt"] == 2
    nack(http, popper, second["receipt_handle"])  # the last attempt: dead-lettered
    redriven = http.post(f"/v1/groups/{popper}/dlq/redrive", json={})
    assert redriven.status_code == 200, redriven.text
    back = receive(http, popper, topic)
    ack(http, popper, back["receipt_handle"])

    expected = [
        ("stored", None, None),
        ("delivered", puller, 1),
        ("acked", puller, 1),
        ("delivered", popper, 1),
        ("nacked", popper, 1),
        ("sent_back", popper, 1),
        ("delivered", popper, 2),
        ("nacked", popper, 2),
        ("dead_lettered", popper, 2),
        ("redriven", None, None),
        ("delivered", popper, 1),
        ("acked", popper, 1),
    ]
    wait_until(lambda: len(trace(http, msg_id)["events"]) >= len(expected))
    timeline = trace(http, msg_id)
    assert (timeline["msg_id"], timeline["topic"], timeline["tracing"]) == (msg_id, topic, "on")
    # Each step once; in order by time (steps of one group are causally ordered).
    assert Counter(steps(timeline)) == Counter(expected)
    times = [e["at"] for e in timeline["events"]]
    assert times == sorted(times)
    for name in (puller, popper):
        assert [s for s in steps(timeline) if s[1] == name] == [s for s in expected if s[1] == name]
    assert steps(timeline)[0] == ("stored", None, None)
    events = timeline["events"]
    stored = events[0]
    assert stored["queue_offset"] == receipt["queue_offset"]
    assert stored["detail"]["keys"] == ["order-42"]
    delivered = [e for e in events if e["type"] == "delivered"]
    assert {e["detail"]["via"] for e in delivered} == {"pull", "pop"}
    assert all(e["consumer"]["client_id"] == "worker-7" for e in delivered)
    [dead] = [e for e in events if e["type"] == "dead_lettered"]
    assert dead["detail"]["dlq_topic"] == f"%DLQ%{popper}"
    [moved] = [e for e in events if e["type"] == "redriven"]
    assert moved["detail"]["target_topic"] == topic
    states = {g["group"]: g["state"] for g in timeline["groups"]}
    assert states == {puller: "acked", popper: "acked"}
    by_key = http.get("/v1/messages/trace", params={"key": "order-42"})
    assert by_key.status_code == 200, by_key.text
    assert by_key.json()["msg_id"] == msg_id


def test_a_cancelled_timer_and_a_rolled_back_transaction_show_their_ends(
    http: httpx.Client, names: tuple[str, str, str]
) -> None:
    topic, _, _ = names
    traced_topic(http, topic)
    timed = send(http, topic, deliver_after_ms=600_000)
    cancelled = http.delete(f"/v1/topics/{topic}/timers/{timed['timer_handle']}")
    assert cancelled.status_code == 200, cancelled.text
    half = http.post(
        f"/v1/topics/{topic}/transactions",
        json={"producer_group": "pg", "message": {"body": "maybe"}},
    )
    assert half.status_code == 201, half.text
    transaction_id = half.json()["transaction_id"]
    rolled = http.post(f"/v1/transactions/{transaction_id}/rollback", json={"producer_group": "pg"})
    assert rolled.status_code == 200, rolled.text

    wait_until(lambda: len(trace(http, timed["uniq_key"])["events"]) == 2)
    assert [e["type"] for e in trace(http, timed["uniq_key"])["events"]] == [
        "timer_scheduled",
        "timer_cancelled",
    ]
    wait_until(lambda: len(trace(http, transaction_id)["events"]) == 2)
    events = trace(http, transaction_id)["events"]
    assert [e["type"] for e in events] == ["transaction_half", "transaction_rollback"]
    assert events[1]["detail"] == {"transaction_id": transaction_id, "producer_group": "pg"}


def test_a_topic_with_tracing_off_answers_its_live_state(
    http: httpx.Client, names: tuple[str, str, str]
) -> None:
    topic, puller, _ = names
    traced_topic(http, topic, trace=None)  # the broker default: off
    first = send(http, topic)
    send(http, topic)
    pull_and_commit_one = http.put(
        f"/v1/groups/{puller}/topics/{topic}/queues/0/offset", json={"offset": 0}
    )
    assert pull_and_commit_one.status_code == 200, pull_and_commit_one.text
    timeline = trace(http, first["uniq_key"])
    assert (timeline["tracing"], timeline["events"]) == ("off", [])
    [waiting] = timeline["groups"]
    assert (waiting["group"], waiting["state"]) == (puller, "waiting")
    assert f"not yet delivered to group {puller}: its offset is 1 behind" in waiting["gap"]


def test_the_lookup_refuses_a_malformed_id_and_answers_404_for_an_unknown_one(
    http: httpx.Client,
) -> None:
    malformed = http.get("/v1/messages/not-an-id/trace")
    assert (malformed.status_code, malformed.json()["code"]) == (400, "INVALID_MESSAGE_ID")
    unknown = http.get(f"/v1/messages/{uuid.uuid4().hex}/trace")
    assert (unknown.status_code, unknown.json()["code"]) == (404, "MESSAGE_NOT_FOUND")
    no_key = http.get("/v1/messages/trace", params={"key": "no-such-key"})
    assert (no_key.status_code, no_key.json()["code"]) == (404, "MESSAGE_NOT_FOUND")


def test_trace_records_are_counted_in_metrics(http: httpx.Client) -> None:
    text = http.get("/metrics").text
    assert "spoolmq_trace_events_written_total" in text
    assert 'spoolmq_trace_events_dropped_total{reason="queue_full"} 0' in text


def test_kill_9_never_shows_a_delivery_that_did_not_happen(tmp_path: Path) -> None:
    broker = ServeProcess(tmp_path / "store", "--trace")
    try:
        with broker.client() as http:
            receipt = send(http, "Orders")
            msg_id = receipt["uniq_key"]
            pulled = http.get("/v1/groups/billing/topics/Orders/messages", headers=CLIENT)
            assert len(pulled.json()["messages"]) == 1  # served, never committed
            received = http.post(
                "/v1/groups/shipping/topics/Orders/receive", json={"invisible_ms": 60_000}
            )
            assert len(received.json()["messages"]) == 1  # received, never acked
            wait_until(lambda: len(trace(http, msg_id)["events"]) == 1)
        broker.kill()
        broker.restart()
        with broker.client() as http:
            timeline = trace(http, msg_id)
            assert steps(timeline) == [("stored", None, None)]
            states = {g["group"]: g["state"] for g in timeline["groups"]}
            assert states == {"shipping": "in_flight"}  # its CK is in the revive log
            # The pull is remembered no more: a commit now proves it, delivered at its time.
            url = "/v1/groups/billing/topics/Orders/queues/0/offset"
            assert http.put(url, json={"offset": 1}).status_code == 200
            wait_until(lambda: len(trace(http, msg_id)["events"]) == 3)
            events = trace(http, msg_id)["events"]
            assert steps({"events": events})[1:] == [
                ("delivered", "billing", 1),
                ("acked", "billing", 1),
            ]
            assert events[1]["detail"]["delivered_at"] == events[2]["at"]
    finally:
        broker.kill()

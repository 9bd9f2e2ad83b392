"""A consumer group's POP state when the group is deleted or its offsets are reset, over HTTP.

A deleted group leaves nothing behind: a group created again under its name starts afresh,
with nothing invisible and no old receipt handle that works. A reset restarts POP consumption
at the reset position; what was in flight on the reset queues is dropped with the old
position (its handles stop working, nothing of it is revived). Both hold across a kill -9,
since a restart rebuilds the POP state from the revive topic.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import LiveServer, wait_until
from tests.serve_process import ServeProcess

LONG_INVISIBLE_MS = 60_000  # longer than any test: nothing comes back by its deadline


@pytest.fixture
def http(client: httpx.Client) -> httpx.Client:
    """The module's server (tests/conftest.py's live_server), by the name the tests use."""
    return client


@pytest.fixture
def names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:10]
    return f"T_{suffix}", f"G_{suffix}"


def create_topic(http: httpx.Client, topic: str) -> None:
    response = http.put(f"/v1/topics/{topic}", json={"read_queue_nums": 1, "write_queue_nums": 1})
    assert response.status_code == 201, response.text


def send(http: httpx.Client, topic: str, *bodies: str) -> None:
    messages = [{"body": body} for body in bodies]
    response = http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert response.status_code == 201, response.text


def receive(http: httpx.Client, group: str, topic: str, **options: Any) -> list[dict[str, Any]]:
    body = {"max_messages": 16, "invisible_ms": LONG_INVISIBLE_MS, **options}
    response = http.post(f"/v1/groups/{group}/topics/{topic}/receive", json=body)
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def ack(http: httpx.Client, group: str, messages: list[dict[str, Any]]) -> list[str]:
    handles = [m["receipt_handle"] for m in messages]
    response = http.post(f"/v1/groups/{group}/acks", json={"receipt_handles": handles})
    assert response.status_code == 200, response.text
    return [r["outcome"] for r in response.json()["results"]]


def in_flight(http: httpx.Client, group: str) -> list[tuple[int, int]]:
    """The group's in-flight messages: (offset, delivery attempt)."""
    response = http.get(f"/v1/groups/{group}/in-flight")
    assert response.status_code == 200, response.text
    return [(m["offset"], m["delivery_attempt"]) for m in response.json()["messages"]]


def reset(http: httpx.Client, group: str, topic: str, to: str, **extra: Any) -> dict[str, Any]:
    response = http.post(
        f"/v1/groups/{group}/offsets/reset", json={"to": to, "topic": topic, **extra}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def delivered(messages: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(m["body"], m["delivery_attempt"]) for m in messages]


# ---------------------------------------------------------------- delete


def test_a_group_created_again_after_a_delete_inherits_nothing(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic)
    send(http, topic, "a", "b", "c")
    taken = receive(http, group, topic)
    assert delivered(taken) == [("a", 1), ("b", 1), ("c", 1)]
    assert ack(http, group, taken[:1]) == ["acked"]
    assert http.delete(f"/v1/groups/{group}").status_code == 204

    again = receive(http, group, topic)  # the receive creates the group again
    assert delivered(again) == [("a", 1), ("b", 1), ("c", 1)]
    assert in_flight(http, group) == [(0, 1), (1, 1), (2, 1)]
    assert ack(http, group, taken[1:]) == ["invalid", "invalid"]
    assert ack(http, group, again) == ["acked"] * 3


def test_a_deleted_fifo_group_leaves_no_queue_blocked(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic)
    fifo = {"consume_mode": "pop", "fifo": True}
    assert http.put(f"/v1/groups/{group}", json=fifo).status_code == 201
    send(http, topic, "first", "second")
    assert delivered(receive(http, group, topic, max_messages=1)) == [("first", 1)]
    assert receive(http, group, topic) == []  # held
    assert http.delete(f"/v1/groups/{group}").status_code == 204
    assert http.put(f"/v1/groups/{group}", json=fifo).status_code == 201
    assert delivered(receive(http, group, topic, max_messages=1)) == [("first", 1)]


# ---------------------------------------------------------------- reset


def test_a_reset_to_earliest_restarts_pop_consumption_there(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic)
    send(http, topic, "a", "b", "c")
    taken = receive(http, group, topic, max_messages=2)
    assert delivered(taken) == [("a", 1), ("b", 1)]
    plan = reset(http, group, topic, "earliest")
    assert [(q["current_offset"], q["target_offset"]) for q in plan["queues"]] == [(0, 0)]
    assert in_flight(http, group) == [], "the reset drops what was in flight"

    again = receive(http, group, topic)
    assert delivered(again) == [("a", 1), ("b", 1), ("c", 1)]
    assert ack(http, group, taken) == ["invalid", "invalid"]
    assert ack(http, group, again) == ["acked"] * 3


def test_a_reset_to_latest_skips_what_was_in_flight_and_not_yet_taken(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic)
    send(http, topic, "a", "b", "c", "d")
    taken = receive(http, group, topic, max_messages=2)
    plan = reset(http, group, topic, "latest")
    assert [(q["current_offset"], q["target_offset"]) for q in plan["queues"]] == [(0, 4)]
    assert in_flight(http, group) == []
    assert receive(http, group, topic) == []
    send(http, topic, "e")
    assert delivered(receive(http, group, topic)) == [("e", 1)]
    assert ack(http, group, taken) == ["invalid", "invalid"]
    lag = http.get(f"/v1/groups/{group}/offsets", params={"topic": topic}).json()
    assert [q["committed_offset"] for t in lag["topics"] for q in t["queues"]] == [4]


def test_a_reset_unblocks_a_fifo_queue_and_wakes_its_parked_receive(
    live_server: LiveServer, http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic)
    fifo = {"consume_mode": "pop", "fifo": True}
    assert http.put(f"/v1/groups/{group}", json=fifo).status_code == 201
    send(http, topic, "first", "second")
    assert delivered(receive(http, group, topic, max_messages=1)) == [("first", 1)]
    waiters = live_server.broker.waiters
    parked_before, woken_before = waiters.parked, waiters.woken
    result: list[list[dict[str, Any]]] = []
    thread = threading.Thread(
        target=lambda: result.append(receive(http, group, topic, wait_ms=30_000))
    )
    thread.start()
    wait_until(lambda: waiters.parked > parked_before)
    reset(http, group, topic, "offsets", offsets={"0": 1})
    thread.join(60)
    assert delivered(result[0]) == [("second", 1)]
    assert waiters.woken > woken_before, "the reset woke it; it did not wait out its time"


def test_a_dry_run_reset_leaves_the_pop_state_alone(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic)
    send(http, topic, "a", "b")
    taken = receive(http, group, topic, max_messages=1)
    reset(http, group, topic, "earliest", dry_run=True)
    assert in_flight(http, group) == [(0, 1)]
    assert delivered(receive(http, group, topic)) == [("b", 1)]
    assert ack(http, group, taken) == ["acked"]


# ---------------------------------------------------------------- kill -9


def test_delete_and_reset_hold_across_a_kill_9(tmp_path: Path) -> None:
    """A restart rebuilds the POP state from the revive topic: the delete and the reset are
    in it, after the checkpoints they undo, so neither the in-flight messages nor the old
    pop offsets come back."""
    server = ServeProcess(tmp_path / "store")
    try:
        with server.client() as http:
            create_topic(http, "Deleted")
            create_topic(http, "Reset")
            send(http, "Deleted", "a", "b")
            send(http, "Reset", "x", "y", "z")
            assert len(receive(http, "gone", "Deleted")) == 2
            assert len(receive(http, "moved", "Reset", max_messages=2)) == 2
            assert http.delete("/v1/groups/gone").status_code == 204
            reset(http, "moved", "Reset", "latest")
        server.kill()
        server.restart()
        with server.client() as http:
            assert delivered(receive(http, "gone", "Deleted")) == [("a", 1), ("b", 1)]
            assert in_flight(http, "moved") == []
            assert receive(http, "moved", "Reset") == []
            send(http, "Reset", "after")
            assert delivered(receive(http, "moved", "Reset")) == [("after", 1)]
    finally:
        server.kill()

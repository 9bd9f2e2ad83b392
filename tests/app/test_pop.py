"""POP consumption over HTTP: a real server on 127.0.0.1, competing worker threads, SYNC and
ASYNC flush."""

from __future__ import annotations

import os
import random
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from services.pop.checkpoint import REVIVE_QUEUE_ID, REVIVE_TOPIC
from tests.conftest import LiveServer, start_server, wait_until

DELAYS = " ".join(["1s"] * 18)  # every retry delay level is 1 s: give-backs return fast
EXACTLY_ONCE_MESSAGES = int(os.environ.get("SPOOLMQ_POP_TEST_MESSAGES", "20000"))


@pytest.fixture(scope="module", params=["async", "sync"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    live = start_server(
        tmp_path_factory.mktemp("pop"), flush=request.param, message_delay_levels=DELAYS
    )
    yield live
    live.stop()


@pytest.fixture
def http(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


@pytest.fixture
def names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:10]
    return f"T_{suffix}", f"G_{suffix}"


def create_topic(http: httpx.Client, topic: str, queues: int = 8) -> None:
    response = http.put(
        f"/v1/topics/{topic}", json={"read_queue_nums": queues, "write_queue_nums": queues}
    )
    assert response.status_code in (200, 201), response.text


def send_batches(
    http: httpx.Client, topic: str, bodies: list[str], batch: int = 100, **extra: Any
) -> None:
    for start in range(0, len(bodies), batch):
        messages = [{"body": b} for b in bodies[start : start + batch]]
        response = http.post(f"/v1/topics/{topic}/messages", json={"messages": messages, **extra})
        assert response.status_code == 201, response.text


def receive(http: httpx.Client, group: str, topic: str, **options: Any) -> list[dict[str, Any]]:
    response = http.post(f"/v1/groups/{group}/topics/{topic}/receive", json=options)
    assert response.status_code == 200, response.text
    messages: list[dict[str, Any]] = response.json()["messages"]
    return messages


def ack(http: httpx.Client, group: str, handles: list[str]) -> list[str]:
    response = http.post(f"/v1/groups/{group}/acks", json={"receipt_handles": handles})
    assert response.status_code == 200, response.text
    return [r["outcome"] for r in response.json()["results"]]


def revive_log_end(server: LiveServer) -> int:
    store = server.broker._store
    assert store is not None
    return server.call(lambda: store.max_offset_in_queue(REVIVE_TOPIC, REVIVE_QUEUE_ID))


def total_lag(http: httpx.Client, group: str, topic: str) -> int:
    response = http.get(f"/v1/groups/{group}/offsets", params={"topic": topic})
    assert response.status_code == 200, response.text
    return sum(t["total_lag"] for t in response.json()["topics"])


# ---------------------------------------------------------------- competing workers


def test_eight_workers_receive_every_message_exactly_once(
    server: LiveServer, http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic)
    count = EXACTLY_ONCE_MESSAGES
    send_batches(http, topic, [f"m{i}" for i in range(count)])
    delivered: list[str] = []
    attempts: Counter[int] = Counter()
    lock = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                while True:
                    with lock:
                        if len(delivered) >= count:
                            return
                    got = receive(client, group, topic, max_messages=16, wait_ms=500)
                    if not got:
                        continue
                    outcomes = ack(client, group, [m["receipt_handle"] for m in got])
                    assert outcomes == ["acked"] * len(got)
                    with lock:
                        delivered.extend(m["body"] for m in got)
                        attempts.update(m["delivery_attempt"] for m in got)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    assert len(delivered) == count
    assert set(delivered) == {f"m{i}" for i in range(count)}
    assert attempts == {1: count}
    assert receive(http, group, topic, wait_ms=0) == []
    assert total_lag(http, group, topic) == 0
    group_out = http.get(f"/v1/groups/{group}").json()
    assert group_out["consume_mode"] == "pop"


def test_unacked_messages_come_back_to_another_worker_and_the_old_ack_is_expired(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic, 2)
    send_batches(http, topic, ["a", "b", "c"], batch=1)
    lazy = receive(http, group, topic, max_messages=3, invisible_ms=1000)
    assert sorted(m["body"] for m in lazy) == ["a", "b", "c"]
    assert {m["delivery_attempt"] for m in lazy} == {1}
    assert receive(http, group, topic) == []  # invisible to everyone else meanwhile
    back: list[dict[str, Any]] = []
    while len(back) < 3:
        got = receive(http, group, topic, max_messages=3, wait_ms=10_000)
        assert got, "the messages must come back"
        back += got
    assert sorted(m["body"] for m in back) == ["a", "b", "c"]
    assert {m["delivery_attempt"] for m in back} == {2}
    assert {m["topic"] for m in back} == {topic}
    assert ack(http, group, [m["receipt_handle"] for m in lazy]) == ["expired"] * 3
    assert ack(http, group, [m["receipt_handle"] for m in back]) == ["acked"] * 3
    assert total_lag(http, group, topic) == 0


def test_extending_invisibility_keeps_the_message_away_and_invalidates_the_old_handle(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic, 1)
    send_batches(http, topic, ["x"])
    [message] = receive(http, group, topic, invisible_ms=1000)
    old = message["receipt_handle"]
    response = http.post(
        f"/v1/groups/{group}/invisibility",
        json={"receipt_handle": old, "invisible_ms": 60_000},
    )
    assert response.status_code == 200, response.text
    new = response.json()["receipt_handle"]
    assert new != old and response.json()["invisible_until"] > message["invisible_until"]
    assert receive(http, group, topic, wait_ms=2000) == []  # past the first deadline
    assert ack(http, group, [old]) == ["invalid"]
    again = http.post(
        f"/v1/groups/{group}/invisibility", json={"receipt_handle": old, "invisible_ms": 1000}
    )
    assert again.status_code == 400
    assert again.json()["code"] == "INVALID_RECEIPT_HANDLE"
    assert ack(http, group, [new]) == ["acked"]


def test_after_max_attempts_the_message_is_dead_lettered_and_redrive_brings_it_back(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic, 1)
    response = http.put(f"/v1/groups/{group}", json={"retry_max_times": 1, "consume_mode": "pop"})
    assert response.status_code == 201, response.text
    send_batches(http, topic, ["poison"])
    attempts = []
    for _ in range(2):
        [message] = receive(http, group, topic, invisible_ms=1000, wait_ms=10_000)
        attempts.append(message["delivery_attempt"])
    assert attempts == [1, 2]

    def dead() -> list[dict[str, Any]]:
        page = http.get(f"/v1/groups/{group}/dlq/messages").json()
        messages: list[dict[str, Any]] = page["messages"]
        return messages

    wait_until(lambda: len(dead()) == 1)
    assert dead()[0]["body"] == "poison"
    assert receive(http, group, topic, wait_ms=1500) == []
    redriven = http.post(f"/v1/groups/{group}/dlq/redrive", json={})
    assert redriven.status_code == 200, redriven.text
    [back] = receive(http, group, topic, wait_ms=10_000)
    assert back["body"] == "poison"
    assert ack(http, group, [back["receipt_handle"]]) == ["acked"]


def test_give_back_returns_the_message_after_the_retry_delay(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic, 1)
    send_batches(http, topic, ["later"])
    [message] = receive(http, group, topic)
    response = http.post(
        f"/v1/groups/{group}/invisibility",
        json={"receipt_handle": message["receipt_handle"], "invisible_ms": 0},
    )
    assert response.status_code == 200, response.text
    assert response.json()["receipt_handle"] is None
    [back] = receive(http, group, topic, wait_ms=10_000)
    assert (back["body"], back["delivery_attempt"]) == ("later", 2)
    assert ack(http, group, [message["receipt_handle"]]) == ["invalid"]
    assert ack(http, group, [back["receipt_handle"]]) == ["acked"]


# ---------------------------------------------------------------- modes and bad input


def test_mixing_offset_pull_and_receive_on_one_group_is_409(
    http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic, 1)
    send_batches(http, topic, ["a"])
    pulled = http.get(f"/v1/groups/{group}/topics/{topic}/messages", params={"auto_commit": True})
    assert pulled.status_code == 200
    refused = http.post(f"/v1/groups/{group}/topics/{topic}/receive", json={})
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["code"] == "CONSUME_MODE_CONFLICT"
    pop_group = group + "_pop"
    receive(http, pop_group, topic)
    refused = http.get(f"/v1/groups/{pop_group}/topics/{topic}/messages")
    assert refused.status_code == 409
    assert refused.json()["code"] == "CONSUME_MODE_CONFLICT"
    commit = http.post(
        f"/v1/groups/{pop_group}/offsets",
        json={"offsets": [{"topic": topic, "queue_id": 0, "offset": 0}]},
    )
    assert commit.status_code == 409


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("receive", {"max_messages": 0}),
        ("receive", {"max_messages": 33}),
        ("receive", {"wait_ms": -1}),
        ("receive", {"wait_ms": 30_001}),
        ("receive", {"invisible_ms": 999}),
        ("receive", {"invisible_ms": 12 * 3600 * 1000 + 1}),
        ("receive", {"invisible_ms": "30s"}),
        ("receive", {"unknown": 1}),
        ("acks", {"receipt_handles": []}),
        ("acks", {"receipt_handles": "abc"}),
        ("acks", {"receipt_handles": [1]}),
        ("invisibility", {"receipt_handle": "abc", "invisible_ms": -1}),
        ("invisibility", {"receipt_handle": "", "invisible_ms": 1000}),
        ("invisibility", {"invisible_ms": 1000}),
    ],
)
def test_bad_numbers_and_bodies_are_422_and_write_nothing(
    server: LiveServer, http: httpx.Client, names: tuple[str, str], path: str, body: Any
) -> None:
    topic, group = names
    create_topic(http, topic, 1)
    before = revive_log_end(server)
    url = (
        f"/v1/groups/{group}/topics/{topic}/receive"
        if path == "receive"
        else f"/v1/groups/{group}/{path}"
    )
    response = http.post(url, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert revive_log_end(server) == before


def test_bad_handles_are_invalid_and_write_nothing(
    server: LiveServer, http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic, 1)
    send_batches(http, topic, ["a"])
    [message] = receive(http, group, topic)
    handle = message["receipt_handle"]
    payload, _, mac = handle.partition(".")
    before = revive_log_end(server)
    forged = [
        "nonsense",
        payload + "." + mac[::-1],
        payload[:-1] + ("A" if payload[-1] != "A" else "B") + "." + mac,
        "é" * 10,
        "x" * 5000,
    ]
    assert ack(http, group, forged) == ["invalid"] * len(forged)
    assert ack(http, group + "_other", [handle]) == ["invalid"]  # another group's handle
    for bad in forged[:4]:
        response = http.post(
            f"/v1/groups/{group}/invisibility", json={"receipt_handle": bad, "invisible_ms": 5000}
        )
        assert response.status_code == 400, response.text
        assert response.json()["code"] == "INVALID_RECEIPT_HANDLE"
    assert revive_log_end(server) == before
    assert ack(http, group, [handle]) == ["acked"]


# ---------------------------------------------------------------- FIFO


def test_fifo_group_completes_every_key_in_send_order_with_workers_giving_back(
    server: LiveServer, http: httpx.Client, names: tuple[str, str]
) -> None:
    topic, group = names
    create_topic(http, topic, 8)
    response = http.put(f"/v1/groups/{group}", json={"consume_mode": "pop", "fifo": True})
    assert response.status_code == 201, response.text
    keys, per_key = 50, 100
    for key in range(keys):
        bodies = [f"{key}:{i}" for i in range(per_key)]
        send_batches(http, topic, bodies, batch=per_key, sharding_key=f"key-{key}")
    completed: dict[str, list[int]] = defaultdict(list)
    redelivered: list[int] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    total = keys * per_key

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                while True:
                    with lock:
                        if sum(len(v) for v in completed.values()) >= total:
                            return
                    got = receive(client, group, topic, max_messages=8, wait_ms=500)
                    with lock:
                        redelivered.extend(
                            m["delivery_attempt"] for m in got if m["delivery_attempt"] > 1
                        )
                    for position, message in enumerate(got):
                        if rng.random() < 0.01:  # give this one back, and keep the order
                            for rest in got[position:]:
                                client.post(
                                    f"/v1/groups/{group}/invisibility",
                                    json={
                                        "receipt_handle": rest["receipt_handle"],
                                        "invisible_ms": 0,
                                    },
                                )
                            break
                        key, index = message["body"].split(":")
                        with lock:  # before the ack: the next one can only come after it
                            completed[key].append(int(index))
                        assert ack(client, group, [message["receipt_handle"]]) == ["acked"]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert not errors, errors
    assert redelivered, "some messages were given back and delivered again"
    assert len(completed) == keys
    for name, order in completed.items():
        assert order == list(range(per_key)), name


def test_fifo_receive_with_a_tag_filter_wakes_when_the_held_message_is_acked(
    server: LiveServer, http: httpx.Client, names: tuple[str, str]
) -> None:
    """A FIFO receive parked behind a held message wakes when that message is acked and the
    next one matches its filter, not at the end of its wait: the queue is readable again."""
    topic, group = names
    create_topic(http, topic, 1)
    response = http.put(f"/v1/groups/{group}", json={"consume_mode": "pop", "fifo": True})
    assert response.status_code == 201, response.text
    messages = [{"body": body, "tags": "Paid"} for body in ("first", "second")]
    sent = http.post(f"/v1/topics/{topic}/messages", json={"messages": messages})
    assert sent.status_code == 201, sent.text
    [held] = receive(http, group, topic, max_messages=1, tags="Paid")
    assert held["body"] == "first"
    waiters = server.broker.waiters
    parked_before, woken_before = waiters.parked, waiters.woken
    result: list[list[dict[str, Any]]] = []
    thread = threading.Thread(
        target=lambda: result.append(
            receive(http, group, topic, max_messages=1, tags="Paid", wait_ms=30_000)
        )
    )
    thread.start()
    wait_until(lambda: waiters.parked > parked_before)
    assert ack(http, group, [held["receipt_handle"]]) == ["acked"]
    thread.join(60)
    assert [m["body"] for m in result[0]] == ["second"]
    assert waiters.woken > woken_before, "the ack woke it; it did not wait out its time"

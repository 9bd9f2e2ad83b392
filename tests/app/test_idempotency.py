"""Idempotency-Key on sends, over HTTP: a repeat is answered with the first receipts and stores
nothing; another payload under the same key is refused; concurrent repeats store one copy."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from app.errors import ApiError
from app.routes.idempotency import idempotency_key, key_of
from services.errors import InvalidIdempotencyKeyError
from services.send import shard_queue
from tests.conftest import LiveServer, start_server

Json = dict[str, Any]


def send(client: httpx.Client, topic: str, key: str | None, **kwargs: Any) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    if "json" not in kwargs and "content" not in kwargs:
        kwargs["json"] = {"body": "order 42 paid"}
    return client.post(f"/v1/topics/{topic}/messages", headers=headers, **kwargs)


def stored_bodies(client: httpx.Client, topic: str) -> list[str]:
    """Every body stored in ``topic``, queue by queue."""
    bodies: list[str] = []
    for queue_id in range(8):
        answer = client.get(f"/v1/topics/{topic}/queues/{queue_id}/messages", params={"offset": 0})
        if answer.status_code == 200:
            bodies += [m["body"] for m in answer.json()["messages"]]
    return bodies


def test_a_repeat_answers_the_first_receipt_and_stores_nothing(
    client: httpx.Client, topic: str
) -> None:
    first = send(client, topic, "order-42-paid")
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    again = send(client, topic, "order-42-paid")
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()  # msg_id, uniq_key, queue, offsets, store time
    assert stored_bodies(client, topic) == ["order 42 paid"]
    receipt = first.json()["messages"][0]
    # Placed by the key's hash, as a sharding key is: a retry reaches the same queue.
    assert receipt["queue_id"] == shard_queue("order-42-paid", 8)
    # The key travels in the stored message (the index finds it by it), but it is the
    # broker's bookkeeping: consumers are not shown it.
    pulled = client.get(
        f"/v1/topics/{topic}/queues/{receipt['queue_id']}/messages", params={"offset": 0}
    ).json()["messages"][0]
    assert "IDEMPOTENCY_KEY" not in pulled["properties"]
    assert "IDEMPOTENCY_FP" not in pulled["properties"]
    metrics = client.get("/metrics").text
    assert f'spoolmq_sends_replayed_total{{topic="{topic}"}} 1' in metrics
    assert f'spoolmq_messages_in_total{{topic="{topic}"}} 1' in metrics


def test_the_quoted_form_names_the_same_key(client: httpx.Client, topic: str) -> None:
    first = send(client, topic, "k-1")
    quoted = send(client, topic, '"k-1"')
    assert quoted.headers["idempotent-replayed"] == "true"
    assert quoted.json() == first.json()
    escaped = send(client, topic, r'"say\"hi\\"', json={"body": "q"})
    assert escaped.status_code == 201
    assert send(client, topic, 'say"hi\\', json={"body": "q"}).json() == escaped.json()


@pytest.mark.parametrize(
    "other",
    [
        {"body": "order 43 paid"},
        {"body": "order 42 paid", "tags": "Paid"},
        {"body": "order 42 paid", "keys": ["order-42"]},
        {"body": "order 42 paid", "properties": {"region": "eu"}},
        {"body": "order 42 paid", "delay_level": 1},
        {"messages": [{"body": "order 42 paid"}, {"body": "order 42 paid"}]},
    ],
)
def test_the_same_key_with_another_payload_is_refused(
    client: httpx.Client, topic: str, other: Json
) -> None:
    assert send(client, topic, "reused").status_code == 201
    refused = send(client, topic, "reused", json=other)
    assert refused.status_code == 422
    assert refused.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert stored_bodies(client, topic) == ["order 42 paid"]


def test_placement_is_not_part_of_the_payload(client: httpx.Client, topic: str) -> None:
    first = send(client, topic, "placed", json={"body": "b", "queue_id": 3})
    assert first.json()["messages"][0]["queue_id"] == 3
    elsewhere = send(client, topic, "placed", json={"body": "b", "queue_id": 5})
    assert elsewhere.headers["idempotent-replayed"] == "true"
    assert elsewhere.json() == first.json()  # where the first copy went


def test_keys_are_per_topic(client: httpx.Client, topic: str) -> None:
    one = send(client, topic, "shared")
    other = send(client, f"{topic}_b", "shared")
    assert "idempotent-replayed" not in other.headers
    assert other.json()["messages"][0]["msg_id"] != one.json()["messages"][0]["msg_id"]


def test_a_batch_has_one_key_and_replays_every_receipt(client: httpx.Client, topic: str) -> None:
    batch = {"messages": [{"body": f"line {i}", "tags": "L"} for i in range(5)]}
    first = send(client, topic, "batch-7", json=batch)
    assert first.status_code == 201
    assert [m["queue_offset"] for m in first.json()["messages"]] == [0, 1, 2, 3, 4]
    again = send(client, topic, "batch-7", json=batch)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    shorter = send(client, topic, "batch-7", json={"messages": batch["messages"][:4]})
    assert shorter.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert sorted(stored_bodies(client, topic)) == [f"line {i}" for i in range(5)]


def test_a_raw_body_takes_a_key(client: httpx.Client, topic: str) -> None:
    def raw(tags: str) -> httpx.Response:
        return client.post(
            f"/v1/topics/{topic}/messages?tags={tags}",
            content=b"\x00\x01raw",
            headers={"content-type": "application/octet-stream", "Idempotency-Key": "raw-1"},
        )

    first = raw("Bin")
    again = raw("Bin")
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    assert raw("Other").json()["code"] == "IDEMPOTENCY_KEY_REUSED"


def test_a_timed_send_replays_its_delivery_time_and_handle(
    client: httpx.Client, topic: str
) -> None:
    body = {"body": "later", "deliver_after_ms": 9000}
    first = send(client, topic, "delayed-1", json=body)
    receipt = first.json()["messages"][0]
    assert (receipt["queue_offset"], receipt["delay_level"]) == (-1, 0)
    assert receipt["deliver_at"] - receipt["store_timestamp"] > 8000
    assert receipt["timer_handle"]
    again = send(client, topic, "delayed-1", json=body)
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "empty"),
        ("k" * 129, "longer than 128"),
        ("two words", "a space"),
        ("clé", "not ASCII"),
        ("tab\tkey", "a control character"),
        ('"bad\\escape"', 'an escape other than \\" and \\\\'),
        ('"un"quoted"', "a bare quote inside the quoted form"),
    ],
)
def test_invalid_keys_are_refused_and_store_nothing(
    client: httpx.Client, topic: str, value: str, why: str
) -> None:
    refused = client.post(
        f"/v1/topics/{topic}/messages",
        json={"body": "x"},
        headers=[(b"Idempotency-Key", value.encode("utf-8"))],
    )
    assert refused.status_code == 400, why
    assert refused.json()["code"] == "INVALID_IDEMPOTENCY_KEY"
    assert stored_bodies(client, topic) == []


def test_two_key_headers_are_refused(client: httpx.Client, topic: str) -> None:
    refused = client.post(
        f"/v1/topics/{topic}/messages",
        json={"body": "x"},
        headers=[("Idempotency-Key", "a"), ("Idempotency-Key", "b")],
    )
    assert refused.json()["code"] == "INVALID_IDEMPOTENCY_KEY"


def test_the_key_properties_are_reserved(client: httpx.Client, topic: str) -> None:
    for name in ("IDEMPOTENCY_KEY", "IDEMPOTENCY_FP", "IDEMPOTENCY_BATCH"):
        refused = send(client, topic, None, json={"body": "x", "properties": {name: "k"}})
        assert refused.json()["code"] == "INVALID_PROPERTY", name


def test_a_send_without_a_key_is_unchanged(client: httpx.Client, topic: str) -> None:
    one = send(client, topic, None, json={"body": "same", "queue_id": 0})
    two = send(client, topic, None, json={"body": "same", "queue_id": 0})
    assert "idempotent-replayed" not in two.headers
    assert one.json()["messages"][0]["queue_offset"] == 0
    assert two.json()["messages"][0]["queue_offset"] == 1
    assert stored_bodies(client, topic) == ["same", "same"]


def test_concurrent_repeats_store_one_copy(live_server: LiveServer, topic: str) -> None:
    answers: list[httpx.Response] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def repeat() -> None:
        with httpx.Client(base_url=live_server.url, timeout=30) as own:
            start.wait()
            for _ in range(5):
                answer = send(own, topic, "at-once", json={"body": "once"})
                with lock:
                    answers.append(answer)

    threads = [threading.Thread(target=repeat) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(answers) == 40
    assert {a.status_code for a in answers} == {201}
    assert len({a.json()["messages"][0]["msg_id"] for a in answers}) == 1
    assert sum("idempotent-replayed" not in a.headers for a in answers) == 1
    with live_server.client() as client:
        assert stored_bodies(client, topic) == ["once"]


def test_outside_the_window_a_key_is_new_again(tmp_path: Path) -> None:
    server = start_server(tmp_path / "store", dedup_window_s=1)
    try:
        with server.client() as client:
            first = send(client, "Windowed", "short-lived")
            assert send(client, "Windowed", "short-lived").headers["idempotent-replayed"]
            stored = first.json()["messages"][0]["store_timestamp"]
            while time.time() * 1000 < stored + 1000:  # the window is by store time
                time.sleep(0.05)
            later = send(client, "Windowed", "short-lived", json={"body": "another"})
            assert later.status_code == 201
            assert "idempotent-replayed" not in later.headers
            assert later.json()["messages"][0]["msg_id"] != first.json()["messages"][0]["msg_id"]
    finally:
        server.stop()


def test_a_repeat_after_a_restart_finds_the_first(tmp_path: Path) -> None:
    server = start_server(tmp_path / "store")
    with server.client() as client:
        first = send(client, "Restarted", "survives", json={"messages": [{"body": "a"}] * 3})
    server.stop()
    server = start_server(tmp_path / "store")
    try:
        with server.client() as client:
            again = send(client, "Restarted", "survives", json={"messages": [{"body": "a"}] * 3})
            assert again.headers["idempotent-replayed"] == "true"
            assert again.json() == first.json()
            assert stored_bodies(client, "Restarted") == ["a", "a", "a"]
    finally:
        server.stop()


def test_without_the_index_a_key_is_refused_and_nothing_stored(tmp_path: Path) -> None:
    server = start_server(tmp_path / "store", message_index_enable=False)
    try:
        with server.client() as client:
            refused = send(client, "NoIndex", "k-1")
            assert refused.status_code == 501
            assert refused.json()["code"] == "IDEMPOTENCY_UNAVAILABLE"
            assert stored_bodies(client, "NoIndex") == []
            assert send(client, "NoIndex", None).status_code == 201
    finally:
        server.stop()


def test_a_repeated_batch_of_bodies_alone_replays_every_receipt(
    client: httpx.Client, topic: str
) -> None:
    batch = {"messages": [{"body": "one"}, {"body": "two"}, {"body": "three"}]}
    first = send(client, topic, "batch-of-bodies", json=batch)
    assert first.status_code == 201, first.text
    assert "idempotent-replayed" not in first.headers
    again = send(client, topic, "batch-of-bodies", json=batch)
    assert again.status_code == 201
    assert again.headers["idempotent-replayed"] == "true"
    assert again.json() == first.json()
    other = {"messages": [{"body": "one"}, {"body": "two"}, {"body": "four"}]}
    refused = send(client, topic, "batch-of-bodies", json=other)
    assert refused.status_code == 422
    assert refused.json()["code"] == "IDEMPOTENCY_KEY_REUSED"
    assert stored_bodies(client, topic) == ["one", "two", "three"]
    receipts = first.json()["messages"]
    assert {r["queue_id"] for r in receipts} == {shard_queue("batch-of-bodies", 8)}
    metrics = client.get("/metrics").text
    assert f'spoolmq_sends_replayed_total{{topic="{topic}"}} 1' in metrics
    assert f'spoolmq_messages_in_total{{topic="{topic}"}} 3' in metrics


@pytest.mark.parametrize(
    "values",
    [
        [],
        [b"order-42-paid"],
        [b"  order-42-paid\t"],
        [b'"order-42-paid"'],
        [b'"a\\"b\\\\c"'],
        [b"cl\xe9"],
        [b""],
        [b"two words"],
        [b"a", b"b"],
        [b"a", b"a"],
        [b"bad key", b"b"],
    ],
)
def test_the_key_read_from_raw_headers_is_the_one_request_headers_give(
    values: list[bytes],
) -> None:
    """The route reads the scope's raw headers itself: the same key, or the same refusal,
    as ``request.headers.getlist``; other headers around it change nothing."""
    raw = [(b"host", b"h"), (b"x-idempotency-key", b"other")]
    for value in values:
        raw += [(b"idempotency-key", value), (b"content-type", b"application/json")]
    request = Request({"type": "http", "headers": raw})

    def answer(read: Callable[[], str | None]) -> tuple[str, str | None]:
        try:
            return ("key", read())
        except (ApiError, InvalidIdempotencyKeyError) as exc:
            return (type(exc).__name__, str(exc))

    expected = answer(lambda: key_of(request.headers.getlist("idempotency-key")))
    assert answer(lambda: idempotency_key(request)) == expected

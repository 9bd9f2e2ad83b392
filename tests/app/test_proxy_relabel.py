"""The proxy's byte-level relabelling of fanned-out answers gives the very bytes that decoding
them and encoding them again gives (what the proxy answered before), over real broker answers:
unicode, escapes, tags, keys, properties (named like the answer's own members, too), bodies
that are not UTF-8, retry messages, and groups whose local queue ids are and are not the
cluster-wide ones."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from app.proxy.forward import BrokerAnswer
from app.proxy.relabel import (
    Relabelled,
    merged_pull,
    merged_receive,
    pull_bytes,
    receive_bytes,
    relabel_pull,
    relabel_receive,
)
from services.cluster import QueueRoute, TopicRoute, globalize, merge_group_pulls, prefix_handle
from tests.conftest import LiveServer, start_server

TOPIC = "Relabel"
# Cluster-wide queues 0-3 are g1's own 0-3 (the same ids); 4-7 are g2's 0-3 (ids change).
ROUTE = TopicRoute(
    TOPIC,
    tuple(QueueRoute(q, "g1", q) for q in range(4))
    + tuple(QueueRoute(4 + q, "g2", q) for q in range(4)),
)
# Level n waits n seconds: a message sent back returns within the test.
DELAYS = " ".join(f"{n}s" for n in range(1, 19))

NASTY = [
    "h\u00e9llo w\u00f6rld \u4e2d\u6587 \U0001f600",
    'quote " backslash \\ slash / tab \t newline \n nul \u0000 bell \u0007 del \u007f',
    '},{"msg_id":"0000","topic":"Relabel","queue_id":1,"receipt_handle":"x"}',
    '"queue_topic":"%RETRY%x","queue_id":2,],"queues":[{"topic":"Relabel","queue_id":3,',
    "ends with a backslash \\",
    "\\",
    "",
    "\u2028\u2029 line separators and a lone-looking \\ud800 text",
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = start_server(tmp_path_factory.mktemp("store"), message_delay_levels=DELAYS)
    yield live
    live.stop()


@pytest.fixture
def http(broker: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=broker.url, timeout=30) as client:
        yield client


def make_topic(http: httpx.Client, topic: str) -> None:
    answer = http.put(f"/v1/topics/{topic}", json={"write_queue_nums": 4})
    assert answer.status_code in (200, 201), answer.text


def send(http: httpx.Client, topic: str, queue_id: int, **message: Any) -> dict[str, Any]:
    answer = http.post(f"/v1/topics/{topic}/messages", json={"queue_id": queue_id, **message})
    assert answer.status_code == 201, answer.text
    receipt: dict[str, Any] = answer.json()["messages"][0]
    return receipt


def fill(http: httpx.Client, topic: str, properties: dict[str, str] | None = None) -> int:
    """Messages of every kind over the topic's four queues; how many were sent."""
    sent = 0
    for index, body in enumerate(NASTY):
        send(
            http,
            topic,
            index % 4,
            body=body,
            tags=body[:20] or None,
            keys=[body[:10].replace(" ", "") or "k", "second-key"],
            properties={"plain": "value", "tricky": body or "-", **(properties or {})},
        )
        sent += 1
    send(http, topic, 1, body="no tags, keys or properties")
    raw = http.post(
        f"/v1/topics/{topic}/messages",
        params={"queue_id": 2, "tags": "binary"},
        content=bytes(range(256)),
        headers={"content-type": "application/octet-stream"},
    )
    assert raw.status_code == 201, raw.text
    return sent + 2


def broker_answer(response: httpx.Response) -> BrokerAnswer:
    assert response.status_code == 200, response.text
    return BrokerAnswer(200, response.content, "application/json", {})


def group_pull(http: httpx.Client, group: str, topic: str, count: int) -> BrokerAnswer:
    return broker_answer(
        http.get(f"/v1/groups/{group}/topics/{topic}/messages", params={"max_messages": count})
    )


def receive(http: httpx.Client, group: str, topic: str, count: int, **extra: Any) -> BrokerAnswer:
    body = {"max_messages": count, "wait_ms": 0, **extra}
    return broker_answer(http.post(f"/v1/groups/{group}/topics/{topic}/receive", json=body))


# ---------------------------------------------------------------- as the proxy answered before


def pull_before(route: TopicRoute, group: str, answers: list[tuple[str, BrokerAnswer]]) -> bytes:
    decoded = [(name, answer.json()) for name, answer in answers]
    return orjson.dumps(merge_group_pulls(route, decoded, group))


def receive_before(route: TopicRoute, group: str, answers: list[tuple[str, BrokerAnswer]]) -> bytes:
    messages: list[dict[str, Any]] = []
    for name, answer in answers:
        out = answer.json()
        if not out.get("messages"):
            continue
        for message in out["messages"]:
            message["receipt_handle"] = prefix_handle(name, message["receipt_handle"])
            message["broker_group"] = name
        globalize(route, name, out["messages"])
        messages.extend(out["messages"])
    return orjson.dumps({"group": group, "topic": route.topic, "messages": messages})


def route_for(topic: str) -> TopicRoute:
    return TopicRoute(topic, ROUTE.queues)


def assert_pull_same(
    route: TopicRoute, group: str, answer: BrokerAnswer, *, bytes_level: dict[str, bool]
) -> None:
    """The answer as g1's and as g2's: each alone and both merged, against the old way."""
    parts: list[Relabelled] = []
    for name, expected in bytes_level.items():
        fast = pull_bytes(answer, route, name, group)
        assert (fast is not None) == expected, f"{name}: byte level {fast is not None}"
        relabelled = relabel_pull(answer, route, name, group)
        assert merged_pull(group, route, [relabelled]) == pull_before(
            route, group, [(name, answer)]
        )
        parts.append(relabelled)
    both = [(name, answer) for name in bytes_level]
    assert merged_pull(group, route, parts) == pull_before(route, group, both)


def assert_receive_same(
    route: TopicRoute, group: str, answer: BrokerAnswer, *, bytes_level: dict[str, bool]
) -> None:
    parts: list[Relabelled] = []
    for name, expected in bytes_level.items():
        fast = receive_bytes(answer, route, name, group)
        assert (fast is not None) == expected, f"{name}: byte level {fast is not None}"
        relabelled = relabel_receive(answer, route, name, group)
        assert merged_receive(group, route.topic, [relabelled]) == receive_before(
            route, group, [(name, answer)]
        )
        parts.append(relabelled)
    both = [(name, answer) for name in bytes_level]
    assert merged_receive(group, route.topic, parts) == receive_before(route, group, both)


# ---------------------------------------------------------------- group pulls


def test_group_pulls_relabelled_as_bytes_are_the_decoded_ones(http: httpx.Client) -> None:
    topic = f"{TOPIC}Pull"
    make_topic(http, topic)
    sent = fill(http, topic)
    route = route_for(topic)
    for count in (1, 2, 3, sent, 32):
        answer = group_pull(http, "Puller", topic, count)
        found = len(answer.json()["messages"])
        assert found == min(count, sent)
        assert_pull_same(route, "Puller", answer, bytes_level={"g1": True, "g2": True})
        assert relabel_pull(answer, route, "g2", "Puller").count == found


def test_an_empty_group_pull_keeps_its_queues(http: httpx.Client) -> None:
    topic = f"{TOPIC}None"
    make_topic(http, topic)
    route = route_for(topic)
    answer = group_pull(http, "Idle", topic, 32)
    assert answer.json()["messages"] == [] and answer.json()["queues"]
    assert_pull_same(route, "Idle", answer, bytes_level={"g1": True, "g2": True})
    assert relabel_pull(answer, route, "g1", "Idle").count == 0


@pytest.mark.parametrize(
    ("name", "g2_bytes"),
    [
        pytest.param("queue_id", True, id="queue_id"),  # after the message's own
        pytest.param("topic", True, id="topic"),
        pytest.param("msg_id", True, id="msg_id"),
        pytest.param("broker_group", True, id="broker_group"),
        pytest.param("queue_topic", False, id="queue_topic"),  # looks like a retry: decoded
    ],
)
def test_properties_named_like_the_answers_own_members(
    http: httpx.Client, name: str, g2_bytes: bool
) -> None:
    topic = f"{TOPIC}P{name.replace('_', '')}"
    make_topic(http, topic)
    properties = {"topic": topic, name: "3"} if name == "queue_id" else {name: "x"}
    sent = fill(http, topic, properties)
    route = route_for(topic)
    answer = group_pull(http, "Props", topic, sent)
    assert_pull_same(route, "Props", answer, bytes_level={"g1": True, "g2": g2_bytes})


def test_retry_messages_keep_their_own_queue_ids(http: httpx.Client) -> None:
    topic = f"{TOPIC}Retry"
    group = "Retrier"
    make_topic(http, topic)
    receipt = send(http, topic, 3, body="fails once \u00e9", tags="T", keys=["k"])
    first = group_pull(http, group, topic, 32).json()
    commits = [
        {"topic": q["topic"], "queue_id": q["queue_id"], "offset": q["next_offset"]}
        for q in first["queues"]
        if q["next_offset"] != q["offset"]
    ]
    assert http.post(f"/v1/groups/{group}/offsets", json={"offsets": commits}).status_code == 200
    back = http.post(
        f"/v1/groups/{group}/retry", json={"msg_id": receipt["msg_id"], "delay_level": 1}
    )
    assert back.status_code == 200, back.text
    send(http, topic, 3, body="a fresh one")
    deadline = time.monotonic() + 20
    while True:
        answer = group_pull(http, group, topic, 32)
        messages = answer.json()["messages"]
        if any("queue_topic" in m for m in messages) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert any(m.get("queue_topic") == f"%RETRY%{group}" for m in messages), messages
    assert any("queue_topic" not in m for m in messages)
    route = route_for(topic)
    # g1's ids do not change: bytes; g2's would, and a retry message keeps its own: decoded.
    assert_pull_same(route, group, answer, bytes_level={"g1": True, "g2": False})


# ---------------------------------------------------------------- POP receives


def test_pop_receives_relabelled_as_bytes_are_the_decoded_ones(http: httpx.Client) -> None:
    topic = f"{TOPIC}Pop"
    make_topic(http, topic)
    sent = fill(http, topic)
    route = route_for(topic)
    for count in (1, 2, 32):
        answer = receive(http, "Popper", topic, count, invisible_ms=600_000)
        found = len(answer.json()["messages"])
        assert_receive_same(route, "Popper", answer, bytes_level={"g1": True, "g2": True})
        assert relabel_receive(answer, route, "g1", "Popper").count == found
    empty = receive(http, "Popper", topic, 32)
    assert empty.json()["messages"] == [], f"{sent} sent, all received"
    assert_receive_same(route, "Popper", empty, bytes_level={"g1": True, "g2": True})


def test_a_pop_property_named_receipt_handle_keeps_its_value(http: httpx.Client) -> None:
    topic = f"{TOPIC}PopHandle"
    make_topic(http, topic)
    sent = fill(http, topic, {"receipt_handle": "mine"})
    route = route_for(topic)
    answer = receive(http, "Popper", topic, 32, invisible_ms=600_000)
    assert_receive_same(route, "Popper", answer, bytes_level={"g1": True, "g2": True})
    relabelled = relabel_receive(answer, route, "g2", "Popper")
    messages = orjson.loads(merged_receive("Popper", topic, [relabelled]))["messages"]
    assert len(messages) == sent
    for message in messages:
        assert message["receipt_handle"].startswith("g2~")
        if "plain" in message["properties"]:
            assert message["properties"]["receipt_handle"] == "mine"


def test_pop_retries_keep_their_own_queue_ids(http: httpx.Client) -> None:
    topic = f"{TOPIC}PopRetry"
    group = "PopRetrier"
    make_topic(http, topic)
    send(http, topic, 2, body="comes back \U0001f600", properties={"p": "v"})
    first = receive(http, group, topic, 32, invisible_ms=1000).json()["messages"]
    assert len(first) == 1
    send(http, topic, 3, body="a fresh one")
    deadline = time.monotonic() + 20
    while True:
        answer = receive(http, group, topic, 32, invisible_ms=600_000)
        messages = answer.json()["messages"]
        if any("queue_topic" in m for m in messages) or time.monotonic() > deadline:
            break
        # what came without the retry is set aside: the loop waits for an answer with it
        time.sleep(0.3)
        send(http, topic, 3, body="another fresh one")
    assert any("queue_topic" in m for m in messages), messages
    route = route_for(topic)
    assert_receive_same(route, group, answer, bytes_level={"g1": True, "g2": False})


def test_an_answer_not_as_expected_is_decoded() -> None:
    spaced = BrokerAnswer(
        200,
        orjson.dumps({"group": "G", "topic": TOPIC, "messages": [], "queues": []}).replace(
            b",", b", "
        ),
        "application/json",
        {},
    )
    assert pull_bytes(spaced, ROUTE, "g1", "G") is None
    assert merged_pull("G", ROUTE, [relabel_pull(spaced, ROUTE, "g1", "G")]) == pull_before(
        ROUTE, "G", [("g1", spaced)]
    )
    other_group = BrokerAnswer(
        200, orjson.dumps({"group": "H", "topic": TOPIC, "messages": []}), "application/json", {}
    )
    assert receive_bytes(other_group, ROUTE, "g1", "G") is None


def pop_message(queue_id: int, body: str, properties: dict[str, str]) -> dict[str, Any]:
    return {
        "msg_id": f"7F00000100002A9F{queue_id:016X}",
        "topic": TOPIC,
        "queue_id": queue_id,
        "queue_offset": 7,
        "body": body,
        "properties": properties,
        "receipt_handle": f"handle-{queue_id}",
        "delivery_attempt": 1,
        "invisible_until": 1795970553449,
    }


def test_a_group_whose_ids_are_the_same_is_answered_whole() -> None:
    """The usual one-group answer is made whole when relabelled and passed on as it is; a
    group whose ids change, an empty answer, and a POP answer with a property named like a
    handle are joined from their pieces."""
    messages = [pop_message(q % 4, body, {}) for q, body in enumerate(NASTY)]
    pulled = {"group": "G", "topic": TOPIC, "messages": messages, "queues": []}
    pull = BrokerAnswer(200, orjson.dumps(pulled), "application/json", {})
    popped = BrokerAnswer(
        200, orjson.dumps({"group": "G", "topic": TOPIC, "messages": messages}), "", {}
    )
    for name, whole in (("g1", True), ("g2", False)):
        relabelled = relabel_pull(pull, ROUTE, name, "G")
        assert (relabelled.whole is not None) == whole
        merged = merged_pull("G", ROUTE, [relabelled])
        assert merged == pull_before(ROUTE, "G", [(name, pull)])
        assert (merged is relabelled.whole) == whole
        received = relabel_receive(popped, ROUTE, name, "G")
        assert (received.whole is not None) == whole
        merged = merged_receive("G", TOPIC, [received])
        assert merged == receive_before(ROUTE, "G", [(name, popped)])
        assert (merged is received.whole) == whole
    empty = BrokerAnswer(200, orjson.dumps({**pulled, "messages": []}), "", {})
    assert relabel_pull(empty, ROUTE, "g1", "G").whole is None
    named = [pop_message(1, "x", {"receipt_handle": "y"}), pop_message(2, "z", {})]
    odd = BrokerAnswer(200, orjson.dumps({"group": "G", "topic": TOPIC, "messages": named}), "", {})
    received = relabel_receive(odd, ROUTE, "g1", "G")
    assert received.whole is None
    assert merged_receive("G", TOPIC, [received]) == receive_before(ROUTE, "G", [("g1", odd)])

"""One answer from several broker groups' answers (:mod:`app.proxy.merge`): the answer of the one
group that answered (a group pull) or delivered (a receive) passes on byte for byte, as its
broker labelled it; the answers of several are put in one, each group's messages (and a pull's
queue positions) in the order it gave them. The answers here are real brokers', asked as the
proxy asks them (labelled for groups g1 and g2 of one cluster-wide topic)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from app.proxy.fanout import GroupAnswer, group_answer
from app.proxy.forward import BrokerAnswer
from app.proxy.merge import merged_pull, merged_receive
from services.cluster import ClusterLabels, QueueRoute, TopicRoute
from tests.conftest import LiveServer, start_server

TOPIC = "Merged"
# Cluster-wide queues 0-1 are g1's own 0-1, 2-3 are g2's 0-1.
ROUTE = TopicRoute(
    TOPIC,
    (
        QueueRoute(0, "g1", 0),
        QueueRoute(1, "g1", 1),
        QueueRoute(2, "g2", 0),
        QueueRoute(3, "g2", 1),
    ),
)


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, LiveServer]]:
    """Two brokers, one per group, each with two queues of the topic and a message in each."""
    started = {name: start_server(tmp_path_factory.mktemp(name)) for name in ("g1", "g2")}
    try:
        for name, live in started.items():
            created = httpx.put(
                f"{live.url}/v1/topics/{TOPIC}",
                json={"write_queue_nums": 2, "read_queue_nums": 2},
                timeout=10,
            )
            assert created.status_code == 201, created.text
            for queue_id in range(2):
                sent = httpx.post(
                    f"{live.url}/v1/topics/{TOPIC}/messages",
                    json={"body": f"{name}-{queue_id}", "queue_id": queue_id},
                    timeout=10,
                )
                assert sent.status_code == 201, sent.text
        yield started
    finally:
        for live in started.values():
            live.stop()


def asked(live: LiveServer, name: str, method: str, path: str, **kwargs: Any) -> GroupAnswer:
    """A broker's answer as the proxy asks for it and keeps it."""
    headers = dict(ClusterLabels.of(ROUTE, name).headers())
    answer = httpx.request(
        method,
        f"{live.url}{path}",
        headers={k.decode(): v.decode() for k, v in headers.items()},
        timeout=10,
        **kwargs,
    )
    assert answer.status_code == 200, answer.text
    count = answer.headers.get("spoolmq-message-count")
    kept = BrokerAnswer(
        200,
        answer.content,
        answer.headers["content-type"],
        [],
        None if count is None else int(count),
    )
    return group_answer(name, kept)


def pulled(brokers: dict[str, LiveServer], group: str, max_messages: int = 32) -> list[GroupAnswer]:
    path = f"/v1/groups/{group}/topics/{TOPIC}/messages"
    return [
        asked(live, name, "GET", path, params={"max_messages": max_messages})
        for name, live in brokers.items()
    ]


def test_one_groups_pull_passes_on_as_its_broker_answered(brokers: dict[str, LiveServer]) -> None:
    for answer in pulled(brokers, "One"):
        assert merged_pull("One", TOPIC, [answer]) is answer.answer.content


def test_several_groups_pulls_are_one_answer_each_groups_in_its_order(
    brokers: dict[str, LiveServer],
) -> None:
    answers = pulled(brokers, "Both")
    merged = orjson.loads(merged_pull("Both", TOPIC, answers))
    assert (merged["group"], merged["topic"]) == ("Both", TOPIC)
    parts = [answer.answer.json() for answer in answers]
    assert merged["messages"] == parts[0]["messages"] + parts[1]["messages"]
    assert merged["queues"] == parts[0]["queues"] + parts[1]["queues"]
    assert sorted((m["queue_id"], m["broker_group"], m["body"]) for m in merged["messages"]) == [
        (0, "g1", "g1-0"),
        (1, "g1", "g1-1"),
        (2, "g2", "g2-0"),
        (3, "g2", "g2-1"),
    ]
    assert sorted((q["queue_id"], q["broker_group"]) for q in merged["queues"]) == [
        (0, "g1"),
        (1, "g1"),
        (2, "g2"),
        (3, "g2"),
    ]


def test_an_empty_group_pull_keeps_every_groups_queues(brokers: dict[str, LiveServer]) -> None:
    answers = pulled(brokers, "Empty", max_messages=1)
    for answer in answers:  # made empty by hand: what a drained group answers
        body = answer.answer.json()
        answer.answer.content = orjson.dumps({**body, "messages": []})
    merged = orjson.loads(merged_pull("Empty", TOPIC, answers))
    assert merged["messages"] == []
    assert sorted(q["queue_id"] for q in merged["queues"]) == [0, 1, 2, 3]
    alone = orjson.loads(merged_pull("Empty", TOPIC, answers[1:]))
    assert sorted(q["queue_id"] for q in alone["queues"]) == [2, 3]
    assert orjson.loads(merged_pull("None", TOPIC, [])) == {
        "group": "None",
        "topic": TOPIC,
        "messages": [],
        "queues": [],
    }


def received(brokers: dict[str, LiveServer], group: str, max_messages: int) -> list[GroupAnswer]:
    path = f"/v1/groups/{group}/topics/{TOPIC}/receive"
    body = {"max_messages": max_messages, "invisible_ms": 600_000}
    return [asked(live, name, "POST", path, json=body) for name, live in brokers.items()]


def test_the_one_group_that_delivered_passes_on_as_its_broker_answered(
    brokers: dict[str, LiveServer],
) -> None:
    first = received(brokers, "PopOne", 2)  # each group hands out both of its messages
    nothing = received(brokers, "PopOne", 2)  # then nothing
    assert [a.count for a in first] == [2, 2] and [a.count for a in nothing] == [0, 0]
    answers = [nothing[0], first[1]]
    assert merged_receive("PopOne", TOPIC, answers) is first[1].answer.content
    handles = [m["receipt_handle"] for m in first[1].answer.json()["messages"]]
    assert all(handle.startswith("g2~") for handle in handles)
    assert orjson.loads(merged_receive("PopOne", TOPIC, nothing)) == {
        "group": "PopOne",
        "topic": TOPIC,
        "messages": [],
    }


def test_several_groups_receives_are_one_answer(brokers: dict[str, LiveServer]) -> None:
    answers = received(brokers, "PopBoth", 1)
    merged = orjson.loads(merged_receive("PopBoth", TOPIC, answers))
    assert (merged["group"], merged["topic"]) == ("PopBoth", TOPIC)
    parts = [answer.answer.json()["messages"] for answer in answers]
    assert merged["messages"] == parts[0] + parts[1]
    assert [m["broker_group"] for m in merged["messages"]] == ["g1", "g2"]
    assert [m["receipt_handle"][:3] for m in merged["messages"]] == ["g1~", "g2~"]
